#include "engine/calm/fixed_sequence.h"

#include <gtest/gtest.h>

#include <vector>

#include "engine/calm/learn_then_test.h"

namespace mnemo::calm {
namespace {

TEST(FixedSequenceTest, StopsAtTheFirstFailure) {
  // The fourth p-value is small, but the third failed: testing has stopped.
  const std::vector<double> p = {0.001, 0.04, 0.2, 0.001};
  FixedSequenceResult r = FixedSequenceTest(p, 0.05);
  EXPECT_EQ(r.accepted, (std::vector<bool>{true, true, false, false}));
  EXPECT_EQ(r.last_accepted, 1);
}

TEST(FixedSequenceTest, BoundaryIsInclusive) {
  FixedSequenceResult r = FixedSequenceTest(std::vector<double>{0.05, 0.0500001}, 0.05);
  EXPECT_EQ(r.last_accepted, 0);
}

TEST(FixedSequenceTest, NothingAcceptedWhenTheFirstFails) {
  FixedSequenceResult r = FixedSequenceTest(std::vector<double>{0.5, 0.0, 0.0}, 0.05);
  EXPECT_EQ(r.last_accepted, -1);
  EXPECT_EQ(r.accepted, (std::vector<bool>{false, false, false}));
  EXPECT_EQ(FixedSequenceTest({}, 0.05).last_accepted, -1);
}

TEST(FixedSequenceTest, AllAccepted) {
  FixedSequenceResult r = FixedSequenceTest(std::vector<double>{0.0, 0.01, 0.02}, 0.05);
  EXPECT_EQ(r.last_accepted, 2);
}

// A measurement where `bad` of `n` texts disagree everywhere and the rest agree everywhere.
CandidateMeasurement Measured(float threshold, int n, int bad, int exit_layer) {
  CandidateMeasurement m;
  m.threshold = threshold;
  for (int i = 0; i < n; ++i) {
    m.texts.push_back(TextAgreement{10, i < bad ? 0 : 10, int64_t{10} * exit_layer});
  }
  return m;
}

TEST(LearnThenTestTest, SortsStrictToLooseAndChoosesTheLastAccepted) {
  // 100 texts, δ = 0.2: risks 0, 0.05, 0.1 pass; 0.3 fails; 0.0 after it is never reached.
  std::vector<CandidateMeasurement> m = {Measured(0.5f, 100, 30, 2), Measured(0.9f, 100, 0, 5),
                                         Measured(0.7f, 100, 10, 3), Measured(0.8f, 100, 5, 4),
                                         Measured(0.4f, 100, 0, 1)};
  LttResult r = LearnThenTest(m, /*n_layers=*/6, /*delta=*/0.2, /*epsilon=*/0.05);
  ASSERT_EQ(r.rows.size(), 5u);
  EXPECT_EQ(r.texts, 100);
  const std::vector<float> order = {0.9f, 0.8f, 0.7f, 0.5f, 0.4f};
  for (size_t j = 0; j < order.size(); ++j) EXPECT_FLOAT_EQ(r.rows[j].threshold, order[j]);
  EXPECT_NEAR(r.rows[2].risk, 0.1, 1e-12);
  EXPECT_NEAR(r.rows[2].mean_exit_layer, 3.0, 1e-12);
  EXPECT_NEAR(r.rows[2].layers_saved, 0.5, 1e-12);
  EXPECT_NEAR(r.rows[2].p_value, 0.0154843688401, 1e-6);  // R = 0.1, n = 100, δ = 0.2
  EXPECT_TRUE(r.rows[2].accepted);
  EXPECT_FALSE(r.rows[3].accepted);
  EXPECT_FALSE(r.rows[4].accepted);
  EXPECT_LT(r.rows[4].p_value, 0.05);  // small, yet untested: the sequence stopped before it
  EXPECT_TRUE(r.calibrated());
  EXPECT_FLOAT_EQ(r.threshold(), 0.7f);
}

TEST(LearnThenTestTest, TooFewTextsCertifyNothing) {
  // 16 texts with zero disagreement cannot certify δ = 0.1 at ε = 0.05 (0.9^16 = 0.185).
  std::vector<CandidateMeasurement> m = {Measured(0.9f, 16, 0, 3)};
  LttResult r = LearnThenTest(m, 6, 0.1, 0.05);
  EXPECT_FALSE(r.calibrated());
  EXPECT_FLOAT_EQ(r.threshold(), kNeverExitThreshold);
  EXPECT_EQ(MinimumTexts(0.1, 0.05), 29);  // 0.9^29 = 0.047 <= 0.05 < 0.9^28
  EXPECT_EQ(MinimumTexts(0.2, 0.05), 14);  // 0.8^14 = 0.044
}

TEST(LearnThenTestTest, RiskIsTheMeanOverTextsNotOverTokens) {
  // One long text fully wrong, one short text fully right: per-text mean 0.5, pooled 0.9.
  CandidateMeasurement m;
  m.threshold = 0.5f;
  m.texts = {TextAgreement{90, 0, 90}, TextAgreement{10, 10, 10}};
  EXPECT_NEAR(m.MeanRisk(), 0.5, 1e-12);
  EXPECT_NEAR(m.PooledRisk(), 0.9, 1e-12);
  EXPECT_NEAR(m.MeanExitLayer(), 1.0, 1e-12);
}

}  // namespace
}  // namespace mnemo::calm
