// The validation/test split of held-out files and the choice of (λ, T) on validation only.
#include "engine/eval/knn_lm_sweep.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

namespace mnemo::eval {
namespace {

TEST(KnnLmSweepTest, SplitIsDisjointCoveringAndAlternating) {
  for (size_t n : {0u, 1u, 2u, 5u, 8u}) {
    const HeldOutSplit split = SplitValidationTest(n);
    std::set<size_t> seen;
    for (size_t i : split.validation) EXPECT_TRUE(seen.insert(i).second);
    for (size_t i : split.test) EXPECT_TRUE(seen.insert(i).second) << i << " on both sides";
    EXPECT_EQ(seen.size(), n);
    EXPECT_EQ(split.validation.size(), (n + 1) / 2);
    for (size_t i : split.validation) EXPECT_EQ(i % 2, 0u);
  }
  EXPECT_EQ(SplitValidationTest(5).test, (std::vector<size_t>{1, 3}));
}

// A file whose bpb per pair is `bpb` over 1000 bytes.
KnnLmTotals File(const std::vector<double>& bpb) {
  KnnLmTotals t;
  t.lm.bytes = 1000;
  t.lm.logprob = -bpb[0] * std::log(2.0) * 1000;
  for (double b : bpb) t.logprob.push_back(-b * std::log(2.0) * 1000);
  t.queries = 1000;
  return t;
}

TEST(KnnLmSweepTest, ChoosesOnValidationOnly) {
  KnnLmGrid grid;
  grid.lambdas = {0.0f, 0.5f};
  grid.temperatures = {1.0f, 10.0f};  // pairs: (0,1) (0,10) (0.5,1) (0.5,10)
  // Validation files (0, 2) prefer pair 2; the test files (1, 3) would prefer pair 3.
  const std::vector<KnnLmTotals> files = {
      File({2.0, 2.0, 1.5, 1.8}), File({2.0, 2.0, 1.9, 1.0}),
      File({2.2, 2.2, 1.7, 2.0}), File({2.1, 2.1, 2.0, 1.2})};
  const KnnLmSweep sweep = SummarizeSweep(grid, files);
  EXPECT_EQ(sweep.chosen, 2u);
  EXPECT_NEAR(sweep.validation.Bpb(2), 1.6, 1e-12);
  EXPECT_NEAR(sweep.validation.lm.Bpb(), 2.1, 1e-12);
  EXPECT_NEAR(sweep.test.Bpb(2), 1.95, 1e-12);
  EXPECT_NEAR(sweep.test.lm.Bpb(), 2.05, 1e-12);
  EXPECT_EQ(sweep.validation.lm.bytes, 2000);
  EXPECT_EQ(sweep.test.queries, 2000);
}

}  // namespace
}  // namespace mnemo::eval
