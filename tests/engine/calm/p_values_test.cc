#include "engine/calm/p_values.h"

#include <gtest/gtest.h>

#include <cmath>

namespace mnemo::calm {
namespace {

// Reference values computed independently (Python, exact rational binomial sums):
//   Hoeffding = exp(−n·h1(min(R, δ), δ)), Bentkus = min(1, e·P(Binom(n, δ) <= ceil(n·R))).
struct Known {
  double risk;
  int64_t n;
  double delta;
  double hoeffding;
  double bentkus;
};
constexpr Known kKnown[] = {
    {0.0, 10, 0.1, 0.3486784401, 0.947806267699},     // 0.9^10; e·0.9^10
    {0.1, 100, 0.2, 0.0255019233678, 0.0154843688401},
    {0.05, 200, 0.1, 0.0353909112643, 0.0219399320859},
    {0.02, 50, 0.1, 0.0770504639175, 0.0918394884608},
    {0.15, 30, 0.2, 0.777743476975, 1.0},
    {0.3, 40, 0.2, 1.0, 1.0},
    {0.0, 30, 0.1, 0.0423911582752, 0.115231115227},
};

TEST(PValuesTest, MatchesHandComputedValues) {
  for (const Known& k : kKnown) {
    SCOPED_TRACE(testing::Message() << "R=" << k.risk << " n=" << k.n << " δ=" << k.delta);
    EXPECT_NEAR(HoeffdingPValue(k.risk, k.n, k.delta), k.hoeffding, 1e-9 + 1e-7 * k.hoeffding);
    EXPECT_NEAR(BentkusPValue(k.risk, k.n, k.delta), k.bentkus, 1e-9 + 1e-7 * k.bentkus);
    EXPECT_NEAR(HoeffdingBentkusPValue(k.risk, k.n, k.delta), std::min(k.hoeffding, k.bentkus),
                1e-9);
  }
}

TEST(PValuesTest, BinomialCdfKnownValues) {
  EXPECT_NEAR(BinomialCdf(10, 100, 0.2), 0.005696380955793505, 1e-12);
  EXPECT_NEAR(BinomialCdf(2, 20, 0.1), 0.676926805189466, 1e-12);
  EXPECT_DOUBLE_EQ(BinomialCdf(-1, 20, 0.1), 0.0);
  EXPECT_DOUBLE_EQ(BinomialCdf(20, 20, 0.1), 1.0);
  // Large n stays finite: by symmetry P(Binom(10000, 1/2) <= 5000) = (1 + P(X = 5000)) / 2.
  EXPECT_NEAR(BinomialCdf(5000, 10000, 0.5), (1.0 + 0.007978646139382154) / 2, 1e-9);
}

TEST(PValuesTest, BernoulliKl) {
  EXPECT_DOUBLE_EQ(BernoulliKl(0.3, 0.3), 0.0);
  EXPECT_NEAR(BernoulliKl(0.0, 0.1), -std::log(0.9), 1e-15);
  EXPECT_NEAR(BernoulliKl(0.1, 0.2), 0.1 * std::log(0.5) + 0.9 * std::log(0.9 / 0.8), 1e-15);
}

TEST(PValuesTest, RoundsCountsUpOnlyPastFloatNoise) {
  // R = 0.1 + 0.1 + 0.1 = 0.30000000000000004 over 10 texts must count 3 bad texts, not 4.
  const double risk = 0.1 + 0.1 + 0.1;
  EXPECT_DOUBLE_EQ(BentkusPValue(risk, 10, 0.5), BentkusPValue(0.3, 10, 0.5));
  EXPECT_LT(BentkusPValue(0.3, 10, 0.5), BentkusPValue(0.31, 10, 0.5));  // 3 vs 4
}

TEST(PValuesTest, NonDecreasingInRiskAndOneAtOrAboveDelta) {
  for (int64_t n : {1, 7, 30, 100, 1000}) {
    for (double delta : {0.05, 0.1, 0.2, 0.5}) {
      double previous = 0.0;
      for (int i = 0; i <= 200; ++i) {
        const double risk = i / 200.0;
        const double p = HoeffdingBentkusPValue(risk, n, delta);
        EXPECT_GE(p, previous - 1e-15) << "n=" << n << " δ=" << delta << " R=" << risk;
        EXPECT_GE(p, 0.0);
        EXPECT_LE(p, 1.0);
        if (risk >= delta) {
          EXPECT_DOUBLE_EQ(p, 1.0) << "n=" << n << " δ=" << delta << " R=" << risk;
        }
        previous = p;
      }
    }
  }
}

TEST(PValuesTest, MoreTextsGiveSmallerPValuesBelowDelta) {
  for (double risk : {0.0, 0.02, 0.05}) {
    double previous = 1.0;
    for (int64_t n : {10, 20, 50, 100, 200, 500}) {
      const double p = HoeffdingBentkusPValue(risk, n, 0.1);
      EXPECT_LE(p, previous) << "R=" << risk << " n=" << n;
      previous = p;
    }
    EXPECT_LT(previous, 0.05) << "500 texts at R=" << risk << " certify δ=0.1";
  }
}

}  // namespace
}  // namespace mnemo::calm
