// The CALM exit rule's two forms (exit_rule.h) decide alike: the tensor form that solo decode
// applies to every token and the scalar form batched decode applies row by row, on ties, NaN,
// and thresholds above 1.
#include "engine/model/exit_rule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace mnemo::model {
namespace {

TEST(ExitRuleTest, ScalarAndTensorFormsAgree) {
  const std::vector<float> confidences = {0.0f, 0.25f, 0.5f, 0.8f, 0.9f, 1.0f, std::nanf("")};
  const torch::Tensor tensor = torch::tensor(confidences);
  for (float threshold : {0.0f, 0.5f, 0.8f, 0.9f, 1.0f, 1.5f, 2.0f}) {
    const torch::Tensor exits = ExitsEarly(tensor, threshold);
    for (size_t i = 0; i < confidences.size(); ++i) {
      EXPECT_EQ(exits[i].item<bool>(), ExitsEarly(confidences[i], threshold))
          << "confidence " << confidences[i] << ", threshold " << threshold;
    }
  }
}

TEST(ExitRuleTest, TiesExitAndNaNOrThresholdsAboveOneNever) {
  EXPECT_TRUE(ExitsEarly(0.9f, 0.9f));
  EXPECT_FALSE(ExitsEarly(0.89f, 0.9f));
  EXPECT_FALSE(ExitsEarly(std::nanf(""), 0.0f));
  EXPECT_FALSE(ExitsEarly(1.0f, 2.0f));
  EXPECT_TRUE(MayExitEarly(1.0f, /*wants_knn_lm_key=*/false));
  EXPECT_FALSE(MayExitEarly(1.01f, /*wants_knn_lm_key=*/false));
  EXPECT_FALSE(MayExitEarly(0.5f, /*wants_knn_lm_key=*/true));
}

}  // namespace
}  // namespace mnemo::model
