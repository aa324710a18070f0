// kNN-LM interpolation math: the λ = 0 and λ = 1 limits, normalisation, tokens without hits,
// and no NaN at extreme distances.
#include "engine/datastore/knn_lm.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

namespace mnemo::datastore {
namespace {

constexpr int kVocab = 11;

torch::Tensor RandomLm(int rows, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::log_softmax(torch::randn({rows, kVocab}) * 3, -1);  // [rows, V]
}

float At(const torch::Tensor& t, int row, int y) { return t[row][y].item<float>(); }

std::vector<Hit> ThreeHits() {
  return {Hit{0, 1.0f, 5}, Hit{1, 2.0f, 5}, Hit{2, 3.0f, 7}};
}

TEST(KnnLmTest, LambdaZeroReturnsLm) {
  const torch::Tensor lm = RandomLm(2, 1);
  auto out = KnnLmLogProbs(lm, {ThreeHits(), ThreeHits()}, {0.0f, 1.0f});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(torch::equal(*out, lm));
}

TEST(KnnLmTest, LambdaOneIsTheKnnDistribution) {
  const torch::Tensor lm = RandomLm(1, 2);
  auto out = KnnLmLogProbs(lm, {ThreeHits()}, {1.0f, 1.0f});
  ASSERT_TRUE(out.ok()) << out.status();
  const double z = std::exp(-1.0) + std::exp(-2.0) + std::exp(-3.0);
  EXPECT_NEAR(At(*out, 0, 5), std::log((std::exp(-1.0) + std::exp(-2.0)) / z), 1e-6);
  EXPECT_NEAR(At(*out, 0, 7), std::log(std::exp(-3.0) / z), 1e-6);
  for (int y = 0; y < kVocab; ++y) {
    EXPECT_FALSE(std::isnan(At(*out, 0, y)));
    if (y != 5 && y != 7) {
      EXPECT_EQ(At(*out, 0, y), -std::numeric_limits<float>::infinity());
    }
  }
}

TEST(KnnLmTest, TemperatureSharpensTheKnnDistribution) {
  const torch::Tensor lm = RandomLm(1, 3);
  auto out = KnnLmLogProbs(lm, {ThreeHits()}, {1.0f, 0.5f});
  ASSERT_TRUE(out.ok());
  const double z = std::exp(-2.0) + std::exp(-4.0) + std::exp(-6.0);
  EXPECT_NEAR(At(*out, 0, 7), std::log(std::exp(-6.0) / z), 1e-6);
}

TEST(KnnLmTest, MixtureIsNormalisedAndMatchesProbabilitySpace) {
  const torch::Tensor lm = RandomLm(3, 4);
  const float lambda = 0.3f;
  auto out = KnnLmLogProbs(lm, {ThreeHits(), {Hit{4, 0.5f, 0}}, ThreeHits()}, {lambda, 2.0f});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FALSE(torch::any(torch::isnan(*out)).item<bool>());
  const torch::Tensor sums = out->exp().sum(-1);
  for (int r = 0; r < 3; ++r) EXPECT_NEAR(sums[r].item<double>(), 1.0, 1e-5);
  // Row 0, token 5, in probability space.
  const double z = std::exp(-0.5) + std::exp(-1.0) + std::exp(-1.5);
  const double knn5 = (std::exp(-0.5) + std::exp(-1.0)) / z;
  const double lm5 = std::exp(lm[0][5].item<double>());
  EXPECT_NEAR(At(*out, 0, 5), std::log(lambda * knn5 + (1 - lambda) * lm5), 1e-5);
  // A token with no hit keeps only the LM branch.
  EXPECT_NEAR(At(*out, 0, 3), std::log(1 - lambda) + lm[0][3].item<double>(), 1e-5);
  // Row 1: one hit gives p_kNN(0) = 1.
  EXPECT_NEAR(At(*out, 1, 0),
              std::log(lambda + (1 - lambda) * std::exp(lm[1][0].item<double>())), 1e-5);
}

TEST(KnnLmTest, LmZerosAndHugeDistancesGiveNoNaN) {
  torch::Tensor lm = torch::full({1, kVocab}, -std::numeric_limits<float>::infinity());
  lm[0][2] = 0.0f;  // the LM is certain of token 2
  const std::vector<Hit> far = {Hit{0, 1e30f, 9}, Hit{1, 3e30f, 4}};
  for (float lambda : {0.0f, 0.5f, 1.0f}) {
    auto out = KnnLmLogProbs(lm, {far}, {lambda, 1e-3f});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_FALSE(torch::any(torch::isnan(*out)).item<bool>()) << "lambda " << lambda;
  }
  auto half = KnnLmLogProbs(lm, {{Hit{0, 1e6f, 9}, Hit{1, 2e6f, 4}}}, {0.5f, 1e-2f});
  ASSERT_TRUE(half.ok());
  EXPECT_NEAR(half->exp().sum().item<double>(), 1.0, 1e-5);
  EXPECT_NEAR(At(*half, 0, 9), std::log(0.5), 1e-5);  // nearest hit dominates
}

TEST(KnnLmTest, RowWithoutHitsKeepsTheLm) {
  const torch::Tensor lm = RandomLm(2, 5);
  auto out = KnnLmLogProbs(lm, {{}, ThreeHits()}, {0.7f, 1.0f});
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(torch::equal((*out)[0], lm[0]));
}

TEST(KnnLmTest, RejectsBadArguments) {
  const torch::Tensor lm = RandomLm(1, 6);
  EXPECT_EQ(KnnLmLogProbs(lm, {ThreeHits()}, {1.5f, 1.0f}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KnnLmLogProbs(lm, {ThreeHits()}, {0.5f, 0.0f}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KnnLmLogProbs(lm, {}, {0.5f, 1.0f}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KnnLmLogProbs(lm, {{Hit{0, 1.0f, kVocab}}}, {0.5f, 1.0f}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mnemo::datastore
