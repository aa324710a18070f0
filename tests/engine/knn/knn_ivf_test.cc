// KnnMemory past its exact threshold: the switch to FAISS IVF, recall against exact search
// (including at 1M entries), FIFO eviction inside the index, and Clone of an IVF memory.
//
// Recall is measured on clustered keys (engine/knn/clustered_keys.h): attention keys are
// clustered, and on uniform random 64-dim vectors every entry is almost equally near any query,
// so no approximate index finds the "true" neighbours and the number would not say anything.
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <cstdio>
#include <limits>
#include <vector>

#include "engine/knn/clustered_keys.h"
#include "engine/knn/ivf_blob_check.h"
#include "engine/knn/ivf_head_index.h"
#include "engine/knn/knn_memory.h"
#include "tests/engine/knn/brute_force.h"

namespace mnemo::knn {
namespace {

using testing::BruteForce;
using testing::ExpectWellFormed;
using testing::Recall;

constexpr int kHeads = 2, kDim = 32, kK = 32;

// Windows like a prefill segment's: query i sees [hi_i - span, hi_i), hi_i = end - count + i + 1,
// clipped at `oldest`.
std::pair<torch::Tensor, torch::Tensor> SlidingWindows(int64_t count, int64_t end, int64_t span,
                                                       int64_t oldest) {
  torch::Tensor hi = torch::arange(end - count + 1, end + 1, torch::kInt64);
  return {(hi - span).clamp_min(oldest), hi};
}

class KnnIvfTest : public ::testing::Test {
 protected:
  KnnIvfTest() : data_(/*centres=*/50, kDim, /*noise=*/1.0, /*seed=*/7) {}

  // Appends `n` positions in segments of 250 to the memory and the reference.
  void Append(KnnMemory& memory, BruteForce& all, int64_t n) {
    for (int64_t done = 0; done < n; done += 250) {
      const int64_t len = std::min<int64_t>(250, n - done);
      torch::Tensor keys = data_.SampleHeads(len, kHeads);
      torch::Tensor values = torch::randn({len, kHeads, kDim});
      ASSERT_TRUE(memory.Append(keys, values).ok());
      all.Append(keys, values);
    }
  }

  torch::Tensor Queries(int64_t q) {  // [H, Q, d]
    return data_.SampleHeads(q, kHeads).transpose(0, 1).contiguous();
  }

  ClusteredKeys data_;
};

TEST_F(KnnIvfTest, ThresholdCrossingKeepsResultsAndEvictsInsideTheIndex) {
  at::manual_seed(11);
  KnnMemoryConfig config;
  config.heads = kHeads;
  config.dim = kDim;
  config.capacity = 20000;
  config.exact_threshold = 4000;
  auto memory = KnnMemory::Create(config).value();
  BruteForce all;
  Append(*memory, all, 4000);
  ASSERT_EQ(memory->mode(), KnnMode::kExact);
  ASSERT_EQ(memory->nlist(), 0);

  // Half the queries see everything, half a sliding window.
  torch::Tensor queries = Queries(64);
  auto [lo, hi] = SlidingWindows(64, 4000, 2500, 0);
  lo.narrow(0, 0, 32).fill_(0);
  hi.narrow(0, 0, 32).fill_(4000);
  KnnResult exact = memory->Search(queries, kK, lo, hi).value();
  ASSERT_TRUE(torch::equal(exact.positions, all.Search(queries, kK, lo, hi)));

  Append(*memory, all, 250);  // crosses the threshold: trains and fills the indexes
  ASSERT_EQ(memory->mode(), KnnMode::kIvf);
  EXPECT_EQ(memory->nlist(), DefaultNlist(20000, 4000));
  KnnResult approx = memory->Search(queries, kK, lo, hi).value();
  ExpectWellFormed(approx, queries, lo, hi, all, 0);
  const double crossing_recall = Recall(approx.positions, exact.positions);
  EXPECT_GE(crossing_recall, 0.9);

  // Three times round the ring: searches stay inside their windows, recall holds, and the
  // indexes drop what the rings dropped (bytes stay bounded).
  for (int round = 0; round < 11; ++round) {
    Append(*memory, all, 5000);
    const int64_t next = memory->next_position(), oldest = memory->oldest_position();
    torch::Tensor q = Queries(64);
    auto [wlo, whi] = SlidingWindows(64, next, 15000, oldest);
    KnnResult found = memory->Search(q, kK, wlo, whi).value();
    ExpectWellFormed(found, q, wlo, whi, all, 0);
    EXPECT_GE(Recall(found.positions, all.Search(q, kK, wlo, whi)), 0.9) << "at " << next;
    // A decode step: one query per head over the whole retained range.
    torch::Tensor one = Queries(1);
    torch::Tensor dlo = torch::full({1}, oldest, torch::kInt64);
    torch::Tensor dhi = torch::full({1}, next, torch::kInt64);
    KnnResult step = memory->Search(one, kK, dlo, dhi).value();
    ExpectWellFormed(step, one, dlo, dhi, all, 0);
  }
  EXPECT_EQ(memory->size(), 20000);
  const int64_t ring_bytes = 2 * int64_t{kHeads} * 20000 * kDim * 4;
  const int64_t entry_bytes = kDim * 4 + 8;
  const int64_t index_bytes = memory->bytes() - ring_bytes;
  // At least the live entries; well under the 59,250 ever added (list vectors may keep up to
  // twice their size allocated).
  EXPECT_GE(index_bytes, int64_t{kHeads} * 20000 * entry_bytes);
  EXPECT_LT(index_bytes, int64_t{kHeads} * 2 * (20000 + 20000 / 16 + 250) * entry_bytes + 200000);
  std::printf("crossing recall %.3f, bytes %lld\n", crossing_recall,
              static_cast<long long>(memory->bytes()));
}

TEST_F(KnnIvfTest, CloneIsIdenticalThenIndependent) {
  at::manual_seed(12);
  KnnMemoryConfig config;
  config.heads = kHeads;
  config.dim = kDim;
  config.capacity = 8000;
  config.exact_threshold = 2000;
  auto memory = KnnMemory::Create(config).value();
  BruteForce all;
  Append(*memory, all, 9000);
  ASSERT_EQ(memory->mode(), KnnMode::kIvf);
  std::unique_ptr<KnnMemory> copy = memory->Clone();
  EXPECT_EQ(copy->mode(), KnnMode::kIvf);
  // The copy's list vectors are allocated to size; the original's may have spare capacity.
  EXPECT_LE(copy->bytes(), memory->bytes());

  torch::Tensor queries = Queries(40);
  auto [lo, hi] = SlidingWindows(40, 9000, 6000, memory->oldest_position());
  KnnResult before = memory->Search(queries, kK, lo, hi).value();
  KnnResult cloned = copy->Search(queries, kK, lo, hi).value();
  EXPECT_TRUE(torch::equal(before.positions, cloned.positions));
  EXPECT_TRUE(torch::equal(before.scores, cloned.scores));
  EXPECT_TRUE(torch::equal(before.values, cloned.values));

  // New entries in the copy only: the original answers as before, the copy sees them.
  BruteForce unused;
  Append(*copy, unused, 3000);
  KnnResult original_after = memory->Search(queries, kK, lo, hi).value();
  EXPECT_TRUE(torch::equal(original_after.positions, before.positions));
  EXPECT_TRUE(torch::equal(original_after.keys, before.keys));
  torch::Tensor newest = torch::full({40}, 9000, torch::kInt64);
  torch::Tensor end = torch::full({40}, 12000, torch::kInt64);
  KnnResult fresh = copy->Search(queries, kK, newest, end).value();
  EXPECT_TRUE(fresh.valid.all().item<bool>());
  EXPECT_EQ(memory->Search(queries, kK, newest, end).value().valid.any().item<bool>(), false);
  torch::Tensor none = torch::empty({0}, torch::kInt64);
  EXPECT_EQ(memory->Search(torch::empty({kHeads, 0, kDim}), kK, none, none).value().positions.numel(), 0);
}

// One head, d = 64, one million entries through the default configuration (threshold 65536,
// nlist 4096, nprobe 8): the size docs/design.md says the memory must scale to.
// An index as bytes is read back only when every count in it fits in the bytes that follow:
// FAISS would size its vectors from them first (an ImportSession carries such bytes).
TEST(IvfBlobTest, ReadsBackWhatSerializeWroteAndRefusesCountsTheBytesCannotHold) {
  at::manual_seed(8);
  IvfOptions options;
  options.nlist = 16;
  auto index = IvfHeadIndex::Train(torch::randn({16 * 40, kDim}), options);
  ASSERT_TRUE(index.ok()) << index.status();
  (*index)->Add(torch::randn({300, kDim}), 0);
  const std::string blob = (*index)->Serialize();
  ASSERT_TRUE(CheckIvfBlob(blob).ok()) << CheckIvfBlob(blob);
  ASSERT_TRUE(IvfHeadIndex::Deserialize(blob).ok());

  // The inverted lists' header: "ilar", nlist, code size, list type, table size, table.
  const size_t lists = blob.find("ilar");
  ASSERT_NE(lists, std::string::npos);
  auto with = [&](size_t offset, uint64_t value) {
    std::string changed = blob;
    std::memcpy(changed.data() + offset, &value, sizeof(value));
    return changed;
  };
  for (const auto& [name, bad] : std::vector<std::pair<std::string, std::string>>{
           {"list count", with(lists + 4, uint64_t{1} << 40)},
           {"table size", with(lists + 24, uint64_t{1} << 50)},
           {"first list's size", with(lists + 32, uint64_t{1} << 40)},
           {"quantizer's vector count", with(blob.find("IxFI") + 4 + 4 + 8 * 3 + 1 + 4,
                                             uint64_t{1} << 45)}}) {
    // Refused by the layout check before FAISS allocates anything (FAISS's own failures
    // read "FAISS cannot read it").
    const absl::Status status = IvfHeadIndex::Deserialize(bad).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << name << ": " << status;
    EXPECT_NE(status.message().find("is not as mnemo writes it"), std::string::npos)
        << name << ": " << status;
  }
  for (size_t cut = 0; cut < blob.size(); cut += 97) {
    EXPECT_EQ(IvfHeadIndex::Deserialize(blob.substr(0, cut)).status().code(),
              absl::StatusCode::kDataLoss)
        << "cut at " << cut;
  }
}

TEST(KnnIvfScaleTest, RecallAtOneMillionEntries) {
  constexpr int64_t kEntries = int64_t{1} << 20, kChunk = 65536, kQueries = 256;
  ClusteredKeys data(/*centres=*/3000, /*dim=*/64, /*noise=*/1.0, /*seed=*/21);
  KnnMemoryConfig config;
  config.heads = 1;
  config.dim = 64;
  config.capacity = kEntries;
  auto memory = KnnMemory::Create(config).value();
  torch::Tensor keys = data.Sample(kEntries);  // [N, 64]
  const auto start = std::chrono::steady_clock::now();
  for (int64_t at = 0; at < kEntries; at += kChunk) {
    torch::Tensor chunk = keys.narrow(0, at, kChunk).unsqueeze(1);  // [chunk, 1, 64]
    ASSERT_TRUE(memory->Append(chunk, chunk).ok());  // values = keys: only positions matter here
  }
  const double append_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(memory->mode(), KnnMode::kIvf);
  ASSERT_EQ(memory->size(), kEntries);

  // Half the queries see all entries, half slide like a prefill segment's.
  torch::Tensor queries = data.Sample(kQueries).unsqueeze(0);  // [1, Q, 64]
  auto [lo, hi] = SlidingWindows(kQueries, kEntries, 900000, 0);
  lo.narrow(0, 0, kQueries / 2).fill_(0);
  hi.narrow(0, 0, kQueries / 2).fill_(kEntries);
  const auto search_start = std::chrono::steady_clock::now();
  KnnResult found = memory->Search(queries, kK, lo, hi).value();
  const double search_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - search_start).count();

  // Exact reference, 32 queries at a time: [32, N] scores masked to each window.
  torch::Tensor expected = torch::empty({1, kQueries, kK}, torch::kInt64);
  torch::Tensor position = torch::arange(kEntries, torch::kInt64);
  for (int64_t q0 = 0; q0 < kQueries; q0 += 32) {
    torch::Tensor scores = torch::matmul(queries[0].narrow(0, q0, 32), keys.t());
    torch::Tensor inside = position.unsqueeze(0).ge(lo.narrow(0, q0, 32).unsqueeze(1)) &
                           position.unsqueeze(0).lt(hi.narrow(0, q0, 32).unsqueeze(1));
    scores.masked_fill_(inside.logical_not(), -std::numeric_limits<float>::infinity());
    expected[0].narrow(0, q0, 32).copy_(std::get<1>(scores.topk(kK, 1)));
  }
  const double recall = Recall(found.positions, expected);
  EXPECT_GE(recall, 0.9);
  EXPECT_TRUE(found.valid.all().item<bool>());
  for (int64_t q = 0; q < kQueries; ++q) {
    torch::Tensor p = found.positions[0][q];
    EXPECT_GE(p.min().item<int64_t>(), lo[q].item<int64_t>());
    EXPECT_LT(p.max().item<int64_t>(), hi[q].item<int64_t>());
  }
  // Scores are exact inner products with the stored keys.
  torch::Tensor rescored = (keys.index_select(0, found.positions.reshape({-1})).view({1, kQueries, kK, 64}) *
                            queries.unsqueeze(2)).sum(-1);
  EXPECT_TRUE(torch::allclose(found.scores, rescored, 1e-5, 1e-6));
  std::printf("1M entries: append %.2f s, %lld-query search %.3f s, recall@32 %.3f, %.1f MiB\n",
              append_s, static_cast<long long>(kQueries), search_s, recall,
              memory->bytes() / 1048576.0);
}

}  // namespace
}  // namespace mnemo::knn
