// SoftmaxResponse against softmax + topk: random and peaked logits, ties at the top (zero
// confidence), leading dimensions kept. ClassifierConfidence and ExitClassifier::Confidence
// against the classifier's LibTorch ops.
#include "engine/model/host_confidence.h"

#include "engine/model/exit_classifier.h"

#include <ATen/Context.h>
#include <c10/core/InferenceMode.h>
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

// sigmoid(w . layer_norm(h) + b) as the exit classifier's ops compute it, in double (float
// ops lose digits on rows with a large mean and a small spread, where the host pass does not).
torch::Tensor ClassifierReference(const torch::Tensor& hidden, const torch::Tensor& weight,
                                  float bias, float eps) {
  torch::Tensor h = hidden.to(torch::kFloat64);
  torch::Tensor features = torch::layer_norm(h, {h.size(-1)}, {}, {}, eps);
  return torch::sigmoid(torch::matmul(features, weight.to(torch::kFloat64)) + bias)
      .to(torch::kFloat32);
}

TEST(ClassifierConfidenceTest, MatchesLayerNormLinearSigmoid) {
  at::manual_seed(4);
  torch::NoGradGuard no_grad;
  const float eps = 1e-5f;
  for (double scale : {0.01, 1.0, 30.0}) {  // near-constant rows, ordinary, large activations
    torch::Tensor hidden = torch::randn({3, 5, 256}) * scale + 2.0;  // an offset mean too
    torch::Tensor weight = torch::randn({256}) * 0.2;
    ASSERT_TRUE(ClassifierConfidenceOnHost(hidden));
    torch::Tensor got = ClassifierConfidence(hidden, weight.data_ptr<float>(), -0.3f, eps);
    ASSERT_EQ(got.sizes(), (std::vector<int64_t>{3, 5}));
    EXPECT_LT((got - ClassifierReference(hidden, weight, -0.3f, eps)).abs().max().item<float>(),
              1e-6)
        << "scale " << scale;
  }
  torch::Tensor wide = torch::randn({4, 300});
  torch::Tensor strided = wide.narrow(1, 10, 256);  // rows not contiguous with each other
  torch::Tensor weight = torch::randn({256});
  EXPECT_LT((ClassifierConfidence(strided, weight.data_ptr<float>(), 0.5f, eps) -
             ClassifierReference(strided, weight, 0.5f, eps))
                .abs()
                .max()
                .item<float>(),
            1e-6);
}

TEST(ClassifierConfidenceTest, ExitClassifierUsesItOutsideAutogradOnly) {
  at::manual_seed(5);
  ExitClassifier classifier(5, 64, 1e-5f);
  {
    torch::NoGradGuard no_grad;
    classifier->weight().normal_();
    classifier->bias().normal_();
  }
  torch::Tensor hidden = torch::randn({7, 64});
  torch::Tensor ops = torch::sigmoid(classifier->Logits(hidden, 3));  // with autograd: ops
  EXPECT_FALSE(ClassifierConfidenceOnHost(hidden.requires_grad_(true)));
  hidden = hidden.detach();
  torch::Tensor host;
  {
    c10::InferenceMode inference;
    ASSERT_TRUE(ClassifierConfidenceOnHost(hidden));
    host = classifier->Confidence(hidden, 3);
  }
  EXPECT_LT((host - ops.detach()).abs().max().item<float>(), 1e-6);
  c10::InferenceMode inference;
  EXPECT_THROW(classifier->Confidence(hidden, 5), c10::Error);  // past the last exit layer
}

}  // namespace
}  // namespace mnemo::model
