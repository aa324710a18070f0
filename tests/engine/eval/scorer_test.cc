// Scoring: the evaluator's bpb is exactly -sum(logprob)/ln2/bytes of a direct Forward, and
// "no memory" equals scoring each seg_len segment independently from BOS.
#include "engine/eval/scorer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/model/model_config.h"
#include "tests/engine/eval/eval_test_util.h"

namespace mnemo::eval {
namespace {

using testing::CodeText;
using testing::TinyModel;

// Direct reference: one Forward over [BOS, text[0..n-2]] and a per-byte gather.
double DirectLogprob(model::Model& model, const model::MemoryOptions& options,
                     const std::string& text) {
  std::vector<int> inputs = {model::kBosId};
  for (size_t i = 0; i + 1 < text.size(); ++i) inputs.push_back(static_cast<unsigned char>(text[i]));
  memory::SessionMemory memory = model.NewMemory(options);
  auto logprobs = model.Forward(inputs, memory, model::Outputs::kAll);  // [n, vocab]
  EXPECT_TRUE(logprobs.ok()) << logprobs.status();
  double sum = 0.0;
  for (size_t i = 0; i < text.size(); ++i) {
    sum += (*logprobs)[static_cast<int64_t>(i)][static_cast<unsigned char>(text[i])].item<float>();
  }
  return sum;
}

TEST(ScorerTest, DocumentInputsShiftByBos) {
  const std::vector<int> inputs = DocumentInputs("abc");
  EXPECT_EQ(inputs, (std::vector<int>{model::kBosId, 'a', 'b'}));
  EXPECT_TRUE(DocumentInputs("").empty());
}

TEST(ScorerTest, BpbMatchesDirectForward) {
  auto model = TinyModel();
  const std::string text = CodeText(300, 1);
  const model::MemoryOptions options{true, true, 64};
  ScoreOptions score;
  score.chunk = 37;  // chunking must not change results
  int64_t reported = 0;
  score.on_progress = [&](int64_t bytes) { reported += bytes; };
  auto totals = ScoreWithMemory(*model, options, text, score);
  ASSERT_TRUE(totals.ok()) << totals.status();
  const double direct = DirectLogprob(*model, options, text);
  EXPECT_EQ(totals->bytes, 300);
  EXPECT_EQ(reported, 300);
  EXPECT_NEAR(totals->logprob, direct, 1e-3);
  EXPECT_NEAR(totals->Bpb(), -direct / std::log(2.0) / 300.0, 1e-5);
  EXPECT_EQ(totals->AvgLayers(), 2.0);
}

TEST(ScorerTest, NoMemoryScoresSegmentsIndependently) {
  auto model = TinyModel();
  const int seg_len = model->config().seg_len;
  const std::string text = CodeText(5 * seg_len + 7, 2);  // a short last segment too
  auto totals = ScoreWithoutMemory(*model, text);
  ASSERT_TRUE(totals.ok()) << totals.status();
  double expected = 0.0;
  for (size_t start = 0; start < text.size(); start += seg_len) {
    expected += DirectLogprob(*model, {false, false, 0}, text.substr(start, seg_len));
  }
  EXPECT_EQ(totals->bytes, static_cast<int64_t>(text.size()));
  EXPECT_NEAR(totals->logprob, expected, 1e-3);

  // Memory must really be reset: carrying it across segments gives a different score.
  auto with_memory = ScoreWithMemory(*model, {false, false, 0}, text);
  ASSERT_TRUE(with_memory.ok());
  EXPECT_GT(std::abs(with_memory->logprob - totals->logprob), 1e-3);
}

TEST(ScorerTest, NoMemoryConditionsFirstSegmentByteOnBosOnly) {
  auto model = TinyModel();
  const int seg_len = model->config().seg_len;
  // Two segments whose first bytes match but whose histories differ: the first byte of the
  // second segment must score exactly like a document's very first byte.
  const std::string first = CodeText(seg_len, 3);
  const std::string text = first + std::string(1, first[0]);
  auto whole = ScoreWithoutMemory(*model, text);
  auto head = ScoreWithoutMemory(*model, first);
  auto one = ScoreWithoutMemory(*model, text.substr(0, 1));
  ASSERT_TRUE(whole.ok() && head.ok() && one.ok());
  EXPECT_NEAR(whole->logprob - head->logprob, one->logprob, 1e-4);
}

TEST(ScorerTest, FullDepthExitMatchesForward) {
  auto model = TinyModel();
  const std::string text = CodeText(200, 4);
  const model::MemoryOptions options{true, true, 64};
  auto exit = ScoreWithExit(*model, options, /*threshold=*/2.0f, text);
  ASSERT_TRUE(exit.ok()) << exit.status();
  auto plain = ScoreWithMemory(*model, options, text);
  ASSERT_TRUE(plain.ok());
  EXPECT_NEAR(exit->logprob, plain->logprob, 1e-3);
  EXPECT_DOUBLE_EQ(exit->AvgLayers(), 2.0);

  // Threshold 0 exits every token at layer 1.
  auto eager = ScoreWithExit(*model, options, /*threshold=*/0.0f, text);
  ASSERT_TRUE(eager.ok()) << eager.status();
  EXPECT_DOUBLE_EQ(eager->AvgLayers(), 1.0);
}

}  // namespace
}  // namespace mnemo::eval
