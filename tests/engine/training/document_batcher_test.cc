#include "engine/training/document_batcher.h"

#include <gtest/gtest.h>

#include "engine/model/model_config.h"
#include "tests/engine/training/training_test_util.h"

namespace mnemo::training {
namespace {

std::vector<corpus::CorpusFile> Files(const ScratchDir& dir) {
  std::vector<corpus::CorpusFile> files;
  const std::string texts[] = {"abcdefghij", "0123456789012345678901234", "xyz"};
  for (int i = 0; i < 3; ++i) {
    files.push_back({dir.Write("d" + std::to_string(i), texts[i]), "d" + std::to_string(i),
                     static_cast<int64_t>(texts[i].size())});
  }
  return files;
}

TEST(DocumentBatcherTest, StreamsEveryDocumentInOrderWithTargetsShiftedByOne) {
  ScratchDir dir;
  DocumentBatcher batcher(Files(dir), /*batch=*/1, /*seg_len=*/8, /*seed=*/3);
  // Reassemble row 0's stream over one epoch; each document must appear whole, once.
  std::string stream;
  int documents = 0;
  int64_t counted = 0;
  for (int step = 0; step < 100 && batcher.epoch() == 0; ++step) {
    auto batch = batcher.Next();
    ASSERT_TRUE(batch.ok());
    if (!batch->new_document.empty()) {
      ++documents;
      ASSERT_EQ(batch->inputs[0][0].item<int64_t>(), model::kBosId) << "documents start with BOS";
    }
    for (int i = 0; i < 8; ++i) {
      const int64_t in = batch->inputs[0][i].item<int64_t>();
      const int64_t target = batch->targets[0][i].item<int64_t>();
      if (target == -1) {
        EXPECT_EQ(in, model::kPadId);
        continue;
      }
      ++counted;
      if (i + 1 < 8 && batch->targets[0][i + 1].item<int64_t>() != -1) {
        EXPECT_EQ(batch->inputs[0][i + 1].item<int64_t>(), target) << "targets are the next input";
      }
      if (target == model::kEosId) stream += '|';
      else stream += static_cast<char>(target);
    }
    EXPECT_EQ(batch->tokens, [&] {
      int64_t n = 0;
      for (int i = 0; i < 8; ++i) n += batch->targets[0][i].item<int64_t>() != -1;
      return n;
    }());
  }
  EXPECT_GE(documents, 3);
  for (const char* doc : {"abcdefghij|", "0123456789012345678901234|", "xyz|"}) {
    EXPECT_NE(stream.find(doc), std::string::npos) << stream;
  }
}

TEST(DocumentBatcherTest, SameSeedSameBatchesDifferentRowsDifferentOrders) {
  ScratchDir dir;
  DocumentBatcher a(Files(dir), 4, 8, 11), b(Files(dir), 4, 8, 11);
  bool rows_differ = false;
  for (int step = 0; step < 20; ++step) {
    auto x = a.Next(), y = b.Next();
    ASSERT_TRUE(x.ok() && y.ok());
    EXPECT_TRUE(torch::equal(x->inputs, y->inputs));
    EXPECT_EQ(x->new_document, y->new_document);
    for (int r = 1; r < 4; ++r) rows_differ |= !torch::equal(x->inputs[0], x->inputs[r]);
  }
  EXPECT_TRUE(rows_differ);
}

}  // namespace
}  // namespace mnemo::training
