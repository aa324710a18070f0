// Evaluator: passes aggregate per-file scores, skip what the model lacks, and report progress.
#include "engine/eval/evaluator.h"

#include <gtest/gtest.h>

#include "tests/engine/eval/eval_test_util.h"

namespace mnemo::eval {
namespace {

std::vector<Document> Docs() {
  std::vector<Document> docs;
  for (uint32_t i = 0; i < 2; ++i) {
    Document d;
    d.path = "doc" + std::to_string(i);
    d.bytes = testing::CodeText(150 + 50 * i, 20 + i);
    d.file_bytes = static_cast<int64_t>(d.bytes.size());
    docs.push_back(d);
  }
  return docs;
}

TEST(EvaluatorTest, MemoryModeSumsDocuments) {
  auto model = testing::TinyModel();
  const std::vector<Document> docs = Docs();
  ProgressMeter progress(TotalBytes(docs), /*sink=*/nullptr);
  Evaluator evaluator(*model, docs, /*chunk=*/64, &progress);
  const std::vector<MemoryMode> modes = PlanMemoryModes(model->config(), {64});
  ASSERT_EQ(modes.size(), 4u);
  auto xl = evaluator.RunMemoryMode(modes[1]);
  ASSERT_TRUE(xl.ok()) << xl.status();
  EXPECT_EQ(xl->totals.bytes, 350);
  EXPECT_EQ(progress.done(), 350);
  ASSERT_EQ(xl->file_bpb.size(), 2u);
  double logprob = 0.0;
  for (const Document& d : docs) {
    auto one = ScoreWithMemory(*model, modes[1].options, d.bytes);
    ASSERT_TRUE(one.ok());
    logprob += one->logprob;
  }
  EXPECT_NEAR(xl->totals.logprob, logprob, 1e-3);

  MemoryMode skipped = modes[3];
  skipped.skip_reason = "model has no kNN layer";
  EXPECT_FALSE(evaluator.RunMemoryMode(skipped).ok());
}

TEST(EvaluatorTest, ExitAndPasskeyPasses) {
  auto model = testing::TinyModel();
  const std::vector<Document> docs = Docs();
  Evaluator evaluator(*model, docs, /*chunk=*/64, /*progress=*/nullptr);
  auto full = evaluator.RunExit(2.0f, {true, true, 64});
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_TRUE(full->full_depth());
  EXPECT_DOUBLE_EQ(full->totals.AvgLayers(), 2.0);

  auto passkey = evaluator.RunPasskey(/*distance=*/100, /*knn=*/true, /*seeds=*/2);
  ASSERT_TRUE(passkey.ok()) << passkey.status();
  EXPECT_EQ(passkey->trials, 2);
  EXPECT_EQ(passkey->knn_mem_len, 256);
  ASSERT_EQ(passkey->outputs.size(), 2u);
  EXPECT_EQ(passkey->outputs[0].size(), 5u);
  EXPECT_EQ(passkey->expected[0].size(), 5u);
  EXPECT_FALSE(evaluator.RunPasskey(/*distance=*/100000, false, 1).ok());
}

}  // namespace
}  // namespace mnemo::eval
