// SoftmaxResponse against softmax + topk: random and peaked logits, ties at the top (zero
// confidence), leading dimensions kept.
#include "engine/model/host_confidence.h"

#include <ATen/Context.h>
#include <gtest/gtest.h>
#include <torch/types.h>

#include <vector>

namespace mnemo::model {
namespace {

torch::Tensor Reference(const torch::Tensor& logits) {
  torch::Tensor top2 = std::get<0>(torch::softmax(logits, -1).topk(2, -1));
  return top2.select(-1, 0) - top2.select(-1, 1);
}

TEST(SoftmaxResponseTest, MatchesSoftmaxTopTwo) {
  at::manual_seed(9);
  for (double scale : {0.1, 1.0, 8.0, 40.0}) {  // flat to very peaked
    torch::Tensor logits = torch::randn({3, 5, 259}) * scale;
    ASSERT_TRUE(SoftmaxResponseOnHost(logits));
    torch::Tensor got = SoftmaxResponse(logits);
    ASSERT_EQ(got.sizes(), (std::vector<int64_t>{3, 5}));
    EXPECT_LT((got - Reference(logits)).abs().max().item<float>(), 1e-6) << "scale " << scale;
  }
}

TEST(SoftmaxResponseTest, TiedLeadersGiveZeroAndStridedInputWorks) {
  torch::Tensor logits = torch::zeros({2, 10});
  logits[0][3] = 5.0f;
  logits[0][7] = 5.0f;  // a tie at the top: p1 == p2
  logits[1][0] = 50.0f;  // certain
  torch::Tensor got = SoftmaxResponse(logits);
  EXPECT_NEAR(got[0].item<float>(), 0.0f, 1e-7);
  EXPECT_NEAR(got[1].item<float>(), 1.0f, 1e-6);
  torch::Tensor wide = torch::randn({4, 20});
  torch::Tensor strided = wide.narrow(1, 2, 9);
  EXPECT_LT((SoftmaxResponse(strided) - Reference(strided)).abs().max().item<float>(), 1e-6);
  EXPECT_FALSE(SoftmaxResponseOnHost(torch::randn({4, 1})));
  EXPECT_FALSE(SoftmaxResponseOnHost(torch::randn({4, 3}, torch::kFloat64)));
}

}  // namespace
}  // namespace mnemo::model
