#include "engine/calm/threshold_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

namespace mnemo::calm {
namespace {

TEST(ThresholdScheduleTest, MatchesTheFormulaAtKnownPoints) {
  // 0.9·0.8 + 0.1·exp(−4·t/N)
  EXPECT_NEAR(ScheduledThreshold(0.8f, 0, 100), 0.82, 1e-6);
  EXPECT_NEAR(ScheduledThreshold(0.8f, 50, 100), 0.72 + 0.1 * std::exp(-2.0), 1e-6);
  EXPECT_NEAR(ScheduledThreshold(0.8f, 100, 100), 0.72 + 0.1 * std::exp(-4.0), 1e-6);
  EXPECT_NEAR(ScheduledThreshold(0.5f, 10, 40, /*tau=*/2.0f), 0.45 + 0.1 * std::exp(-0.5), 1e-6);
}

TEST(ThresholdScheduleTest, StartsStricterThanLambdaAndEndsLooser) {
  const float lambda = 0.6f;
  EXPECT_GT(ScheduledThreshold(lambda, 0, 256), lambda);
  EXPECT_LT(ScheduledThreshold(lambda, 256, 256), lambda);
  float previous = 2.0f;
  for (int t = 0; t <= 256; ++t) {
    const float value = ScheduledThreshold(lambda, t, 256);
    EXPECT_LE(value, previous) << "t=" << t;
    previous = value;
  }
}

TEST(ThresholdScheduleTest, ClampsTokenIndexAndResult) {
  EXPECT_FLOAT_EQ(ScheduledThreshold(0.7f, 500, 100), ScheduledThreshold(0.7f, 100, 100));
  EXPECT_FLOAT_EQ(ScheduledThreshold(0.7f, -3, 100), ScheduledThreshold(0.7f, 0, 100));
  EXPECT_FLOAT_EQ(ScheduledThreshold(0.7f, 5, 0), ScheduledThreshold(0.7f, 0, 100));
  EXPECT_FLOAT_EQ(ScheduledThreshold(-1.0f, 0, 100), 0.0f);  // 0.9·(−1) + 0.1 < 0
  EXPECT_FLOAT_EQ(ScheduledThreshold(0.0f, 100, 100), static_cast<float>(0.1 * std::exp(-4.0)));
}

TEST(ThresholdScheduleTest, UncalibratedThresholdNeverExits) {
  EXPECT_FALSE(ExitEnabled(1.0f));
  EXPECT_FALSE(ExitEnabled(2.0f));
  EXPECT_TRUE(ExitEnabled(0.999f));
  for (int t : {0, 50, 100}) {
    const float value = ScheduledThreshold(1.0f, t, 100);
    EXPECT_TRUE(std::isinf(value));
    EXPECT_FALSE(1.0f >= value);  // no confidence reaches it
  }
  EXPECT_TRUE(std::isinf(ScheduledThreshold(NAN, 0, 100)));
}

}  // namespace
}  // namespace mnemo::calm
