// CALM early exit with state propagation, and per-row document resets used in training.
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "engine/model/model.h"
#include "tests/engine/tiny_model.h"

namespace mnemo::model {
namespace {

using ::mnemo::testing::MaxDiff;
using ::mnemo::testing::RandomBytes;

ModelConfig Config() { return ::mnemo::testing::TinyMemoryModelConfig(); }

TEST(EarlyExitTest, ThresholdAboveOneIsFullDepth) {
  auto model = Model::Random(Config(), 5);
  std::vector<int> tokens = RandomBytes(90, 1);
  auto m1 = model->NewMemory();
  auto m2 = model->NewMemory();
  auto full = model->Forward(tokens, m1);
  auto exit = model->ForwardWithExit(tokens, m2, 2.0f);
  ASSERT_TRUE(full.ok() && exit.ok());
  EXPECT_LT(MaxDiff(*full, exit->logprobs), 1e-5);
  for (int layer : exit->exit_layers) EXPECT_EQ(layer, 3);
}

TEST(EarlyExitTest, ThresholdZeroExitsAfterTheFirstLayerThroughTheSharedHead) {
  auto model = Model::Random(Config(), 5);
  std::vector<int> tokens = RandomBytes(40, 2);
  auto m1 = model->NewMemory();
  auto exit = model->ForwardWithExit(tokens, m1, 0.0f);
  ASSERT_TRUE(exit.ok());
  for (int layer : exit->exit_layers) EXPECT_EQ(layer, 1);
  // Reference: layer 1's output read through the shared head, segment by segment.
  c10::InferenceMode guard;
  auto m2 = model->NewMemory();
  std::vector<torch::Tensor> rows;
  for (size_t start = 0; start < tokens.size(); start += 16) {
    const size_t n = std::min<size_t>(16, tokens.size() - start);
    std::vector<int64_t> ids(tokens.begin() + start, tokens.begin() + start + n);
    std::vector<torch::Tensor> layers;
    model->transformer()->forward(torch::tensor(ids).view({1, -1}), m2, &layers);
    rows.push_back(torch::log_softmax(model->transformer()->Logits(layers[0])[0], -1));
  }
  EXPECT_LT(MaxDiff(exit->logprobs, torch::cat(rows, 0)), 1e-5);
}

TEST(EarlyExitTest, StatePropagationIsIndependentOfChunking) {
  // With exits, skipped layers get keys/values from the exit state. Token-by-token decoding
  // must then agree with processing whole segments at once.
  auto model = Model::Random(Config(), 9);
  std::vector<int> tokens = RandomBytes(120, 3);
  // Random weights give flat distributions: pick the threshold that exits about half the
  // tokens early, so both kinds of token are exercised.
  float threshold = 0;
  int best_gap = 1 << 30;
  for (float candidate = 1e-5f; candidate < 1.0f; candidate *= 1.5f) {
    auto memory = model->NewMemory();
    auto trial = model->ForwardWithExit(tokens, memory, candidate);
    ASSERT_TRUE(trial.ok());
    int early = 0;
    for (int layer : trial->exit_layers) early += layer < 3;
    if (std::abs(early - 60) < best_gap) {
      best_gap = std::abs(early - 60);
      threshold = candidate;
    }
  }
  auto whole = model->NewMemory();
  auto once = model->ForwardWithExit(tokens, whole, threshold);
  ASSERT_TRUE(once.ok());
  int early = 0;
  for (int layer : once->exit_layers) early += layer < 3;
  ASSERT_GT(early, 20) << "no threshold mixes early and full-depth exits";
  ASSERT_LT(early, 100) << "no threshold mixes early and full-depth exits";

  auto stepwise = model->NewMemory();
  std::vector<torch::Tensor> rows;
  std::vector<int> layers;
  for (size_t i = 0; i < tokens.size(); ++i) {
    auto step = model->ForwardWithExit(absl::MakeConstSpan(tokens).subspan(i, 1), stepwise, threshold);
    ASSERT_TRUE(step.ok());
    rows.push_back(step->logprobs);
    layers.push_back(step->exit_layers[0]);
  }
  EXPECT_EQ(layers, once->exit_layers);
  EXPECT_LT(MaxDiff(torch::cat(rows, 0), once->logprobs), 1e-4);

  // And the exits changed what later tokens see (otherwise propagation would be untested).
  auto plain = model->NewMemory();
  auto full = model->Forward(tokens, plain);
  ASSERT_TRUE(full.ok());
  EXPECT_GT(MaxDiff(full->narrow(0, 60, 60), once->logprobs.narrow(0, 60, 60)), 1e-3);
}

TEST(RowResetTest, ResetRowEqualsAFreshMemory) {
  // Row 1 switches to a new document at position 32; its outputs must equal scoring that
  // document from an empty memory. Row 0 continues its own document unaffected.
  auto model = Model::Random(Config(), 4);
  c10::InferenceMode guard;
  std::vector<int> doc_a = RandomBytes(80, 5), doc_b = RandomBytes(48, 6), doc_c = RandomBytes(48, 7);
  auto batch = model->transformer()->NewMemory(2, torch::kCPU);
  auto segment = [](const std::vector<int>& doc, int start) {
    std::vector<int64_t> ids(doc.begin() + start, doc.begin() + start + 16);
    return torch::tensor(ids).view({1, 16});
  };
  std::vector<torch::Tensor> row1_after_reset, row0;
  for (int s = 0; s < 5; ++s) {
    if (s == 2) batch.ResetRow(1);
    torch::Tensor row1_tokens = s < 2 ? segment(doc_b, s * 16) : segment(doc_c, (s - 2) * 16);
    torch::Tensor tokens = torch::cat({segment(doc_a, s * 16), row1_tokens}, 0);  // [2, 16]
    torch::Tensor logits = model->transformer()->Logits(model->transformer()->forward(tokens, batch));
    row0.push_back(logits[0]);
    if (s >= 2) row1_after_reset.push_back(logits[1]);
  }
  auto fresh = model->transformer()->NewMemory(1, torch::kCPU);
  std::vector<torch::Tensor> expected;
  for (int s = 0; s < 3; ++s) {
    expected.push_back(model->transformer()->Logits(model->transformer()->forward(segment(doc_c, s * 16), fresh))[0]);
  }
  EXPECT_LT(MaxDiff(torch::cat(row1_after_reset, 0), torch::cat(expected, 0)), 1e-4);

  auto alone = model->transformer()->NewMemory(1, torch::kCPU);
  std::vector<torch::Tensor> expected_a;
  for (int s = 0; s < 5; ++s) {
    expected_a.push_back(model->transformer()->Logits(model->transformer()->forward(segment(doc_a, s * 16), alone))[0]);
  }
  EXPECT_LT(MaxDiff(torch::cat(row0, 0), torch::cat(expected_a, 0)), 1e-4);
}

}  // namespace
}  // namespace mnemo::model
