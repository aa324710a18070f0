// KnnMemory in exact mode: equality with brute force under FIFO wrap-around, window rules,
// accounting, Clone, and argument errors.
#include "engine/knn/knn_memory.h"

#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/engine/knn/brute_force.h"

namespace mnemo::knn {
namespace {

using testing::BruteForce;
using testing::ExpectWellFormed;
using testing::RandomUnit;

torch::Tensor Longs(std::vector<int64_t> v) { return torch::tensor(v, torch::kInt64); }

KnnMemoryConfig SmallConfig(int64_t capacity, int64_t first_position = 0) {
  KnnMemoryConfig c;
  c.heads = 2;
  c.dim = 16;
  c.capacity = capacity;
  c.first_position = first_position;
  return c;  // exact_threshold 65536 > capacity: exact throughout
}

TEST(KnnMemoryTest, ExactEqualsBruteForceThroughWrapAround) {
  at::manual_seed(1);
  constexpr int64_t kCapacity = 1000, kFirst = 37;
  constexpr int kK = 8;
  auto memory = KnnMemory::Create(SmallConfig(kCapacity, kFirst)).value();
  BruteForce all(kFirst);
  // Uneven appends (1 to 300 positions), ten times round the ring.
  const std::vector<int64_t> steps = {1, 7, 300, 64, 1, 1, 255, 129, 3, 200};
  int checks = 0;
  for (int round = 0; memory->next_position() < kFirst + 10 * kCapacity; ++round) {
    const int64_t n = steps[round % steps.size()];
    torch::Tensor keys = RandomUnit({n, 2, 16}), values = torch::randn({n, 2, 16});
    ASSERT_TRUE(memory->Append(keys, values).ok());
    all.Append(keys, values);
    const int64_t next = memory->next_position(), oldest = memory->oldest_position();
    ASSERT_EQ(memory->size(), std::min<int64_t>(next - kFirst, kCapacity));
    ASSERT_EQ(oldest, next - memory->size());
    // Whole memory; a model-like window; fewer than k entries; empty; past either end.
    const int64_t model_lo = std::max(oldest, next - 300);
    // Before anything is evicted a window may start before the first position.
    const int64_t early_lo = oldest > kFirst ? oldest : kFirst - 50;
    torch::Tensor lo = Longs({oldest, model_lo, next - 5, next - 3, oldest + memory->size() / 3,
                              early_lo});
    torch::Tensor hi = Longs({next, std::max(model_lo, next - 40), next - 1, next - 3, next + 100,
                              next});
    torch::Tensor queries = RandomUnit({2, 6, 16});
    auto found = memory->Search(queries, kK, lo, hi);
    ASSERT_TRUE(found.ok()) << found.status();
    ExpectWellFormed(*found, queries, lo, hi, all, kFirst);
    torch::Tensor expected = all.Search(queries, kK, lo, hi);
    ASSERT_TRUE(torch::equal(found->positions, expected))
        << "after " << next - kFirst << " positions\n" << found->positions << "\n" << expected;
    // Fewer than k visible: exactly the visible count is valid.
    EXPECT_EQ(found->valid.select(1, 2).sum().item<int64_t>(),
              2 * std::clamp<int64_t>(next - kFirst - 1, 0, 4));
    EXPECT_EQ(found->valid.select(1, 3).sum().item<int64_t>(), 0);
    ++checks;
  }
  EXPECT_GT(checks, 80);
  EXPECT_EQ(memory->mode(), KnnMode::kExact);
}

TEST(KnnMemoryTest, ManyQueriesSearchInBlocksLikeOne) {
  // Enough queries that the exact scan splits them into blocks; each must match its own search.
  at::manual_seed(2);
  KnnMemoryConfig config = SmallConfig(40000);
  auto memory = KnnMemory::Create(config).value();
  BruteForce all;
  torch::Tensor keys = RandomUnit({40000, 2, 16}), values = torch::randn({40000, 2, 16});
  ASSERT_TRUE(memory->Append(keys, values).ok());
  all.Append(keys, values);
  constexpr int64_t kQueries = 300;
  torch::Tensor queries = RandomUnit({2, kQueries, 16});
  torch::Tensor hi = torch::arange(39000, 39000 + kQueries, torch::kInt64);
  torch::Tensor lo = hi - 30000;
  auto found = memory->Search(queries, 16, lo, hi);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_TRUE(torch::equal(found->positions, all.Search(queries, 16, lo, hi)));
}

TEST(KnnMemoryTest, FifoNeverReturnsEvictedAndKeepsTheWindowEdge) {
  at::manual_seed(3);
  constexpr int64_t kCapacity = 256, kFirst = 1000;
  auto memory = KnnMemory::Create(SmallConfig(kCapacity, kFirst)).value();
  BruteForce all(kFirst);
  const int64_t ring_bytes = 2 * (2 * kCapacity * 16 * 4);
  EXPECT_EQ(memory->bytes(), 0);  // rings grow with the entries (knn_growth_test.cc)
  EXPECT_EQ(memory->size(), 0);
  for (int64_t i = 0; i < 3 * kCapacity; ++i) {
    // Decode-style: one position at a time.
    torch::Tensor keys = RandomUnit({1, 2, 16}), values = torch::randn({1, 2, 16});
    ASSERT_TRUE(memory->Append(keys, values).ok());
    all.Append(keys, values);
    const int64_t next = memory->next_position(), oldest = memory->oldest_position();
    // Query with the key at the window's oldest edge: it must come back first, with score 1.
    torch::Tensor queries = all.keys()[oldest - kFirst].unsqueeze(1);  // [H, 1, d]
    auto found = memory->Search(queries, 4, Longs({oldest}), Longs({next}));
    ASSERT_TRUE(found.ok()) << found.status();
    ExpectWellFormed(*found, queries, Longs({oldest}), Longs({next}), all, kFirst);
    EXPECT_EQ(found->positions[0][0][0].item<int64_t>(), oldest);
    EXPECT_EQ(found->positions[1][0][0].item<int64_t>(), oldest);
    EXPECT_NEAR(found->scores[0][0][0].item<float>(), 1.0f, 1e-5);
    // A capacity below the first allocation is allocated whole by the first append; then
    // nothing grows or moves.
    EXPECT_EQ(memory->bytes(), ring_bytes);
  }
  EXPECT_EQ(memory->next_position(), kFirst + 3 * kCapacity);
  EXPECT_EQ(memory->size(), kCapacity);
  EXPECT_EQ(memory->oldest_position(), kFirst + 2 * kCapacity);
  // Nothing older than the retained range, whatever the query: ask for everything.
  torch::Tensor queries = RandomUnit({2, 8, 16});
  torch::Tensor lo = torch::full({8}, memory->oldest_position(), torch::kInt64);
  torch::Tensor hi = torch::full({8}, memory->next_position(), torch::kInt64);
  auto found = memory->Search(queries, kCapacity, lo, hi);
  ASSERT_TRUE(found.ok());
  EXPECT_TRUE(found->valid.all().item<bool>());
  EXPECT_GE(found->positions.min().item<int64_t>(), memory->oldest_position());
  // A window reaching evicted positions is the caller's bug: capacity too small.
  auto stale = memory->Search(queries.narrow(1, 0, 1), 4, Longs({memory->oldest_position() - 1}),
                              Longs({memory->next_position()}));
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(stale.status().message().find("evicted"), std::string::npos);
}

TEST(KnnMemoryTest, AppendLongerThanCapacityKeepsTheTail) {
  at::manual_seed(4);
  auto memory = KnnMemory::Create(SmallConfig(100)).value();
  BruteForce all;
  torch::Tensor keys = RandomUnit({350, 2, 16}), values = torch::randn({350, 2, 16});
  ASSERT_TRUE(memory->Append(keys, values).ok());
  all.Append(keys, values);
  EXPECT_EQ(memory->oldest_position(), 250);
  torch::Tensor queries = RandomUnit({2, 3, 16});
  torch::Tensor lo = Longs({250, 260, 300}), hi = Longs({350, 340, 301});
  auto found = memory->Search(queries, 10, lo, hi);
  ASSERT_TRUE(found.ok());
  ExpectWellFormed(*found, queries, lo, hi, all, 0);
  EXPECT_TRUE(torch::equal(found->positions, all.Search(queries, 10, lo, hi)));
}

TEST(KnnMemoryTest, CloneIsIdenticalThenIndependent) {
  at::manual_seed(5);
  auto memory = KnnMemory::Create(SmallConfig(500)).value();
  ASSERT_TRUE(memory->Append(RandomUnit({700, 2, 16}), torch::randn({700, 2, 16})).ok());
  std::unique_ptr<KnnMemory> copy = memory->Clone();
  EXPECT_EQ(copy->next_position(), memory->next_position());
  EXPECT_EQ(copy->bytes(), memory->bytes());
  torch::Tensor queries = RandomUnit({2, 5, 16});
  torch::Tensor lo = torch::full({5}, 200, torch::kInt64), hi = torch::full({5}, 700, torch::kInt64);
  KnnResult before = memory->Search(queries, 16, lo, hi).value();
  KnnResult cloned = copy->Search(queries, 16, lo, hi).value();
  EXPECT_TRUE(torch::equal(before.positions, cloned.positions));
  EXPECT_TRUE(torch::equal(before.values, cloned.values));
  // Appending to the original (overwriting ring slots) leaves the copy as it was.
  ASSERT_TRUE(memory->Append(RandomUnit({300, 2, 16}), torch::randn({300, 2, 16})).ok());
  KnnResult later = copy->Search(queries, 16, lo, hi).value();
  EXPECT_TRUE(torch::equal(later.positions, before.positions));
  EXPECT_TRUE(torch::equal(later.keys, before.keys));
  EXPECT_EQ(copy->next_position(), 700);
}

TEST(KnnMemoryTest, RejectsBadShapesAndArguments) {
  EXPECT_FALSE(KnnMemory::Create(SmallConfig(0)).ok());
  KnnMemoryConfig bad = SmallConfig(100);
  bad.heads = 0;
  EXPECT_EQ(KnnMemory::Create(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = SmallConfig(100000);
  bad.exact_threshold = 1000;
  bad.nlist = 2048;  // more lists than the 1001 entries it would train on
  EXPECT_EQ(KnnMemory::Create(bad).status().code(), absl::StatusCode::kInvalidArgument);

  auto memory = KnnMemory::Create(SmallConfig(100)).value();
  auto append_code = [&](const torch::Tensor& k, const torch::Tensor& v) {
    return memory->Append(k, v).code();
  };
  const auto kBad = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(append_code(RandomUnit({4, 3, 16}), torch::randn({4, 3, 16})), kBad);  // heads
  EXPECT_EQ(append_code(RandomUnit({4, 2, 8}), torch::randn({4, 2, 8})), kBad);    // dim
  EXPECT_EQ(append_code(RandomUnit({4, 32}), torch::randn({4, 32})), kBad);        // rank
  EXPECT_EQ(append_code(RandomUnit({4, 2, 16}), torch::randn({5, 2, 16})), kBad);  // mismatch
  EXPECT_EQ(append_code(RandomUnit({4, 2, 16}).to(torch::kFloat64), torch::randn({4, 2, 16})),
            kBad);
  EXPECT_EQ(memory->next_position(), 0);  // nothing appended by the failures
  ASSERT_TRUE(memory->Append(RandomUnit({50, 2, 16}), torch::randn({50, 2, 16})).ok());

  torch::Tensor q = RandomUnit({2, 3, 16});
  torch::Tensor lo = Longs({0, 0, 0}), hi = Longs({50, 50, 50});
  auto search_code = [&](const torch::Tensor& qq, int k, const torch::Tensor& l,
                         const torch::Tensor& h) { return memory->Search(qq, k, l, h).status().code(); };
  EXPECT_EQ(search_code(q, 0, lo, hi), kBad);                          // k < 1
  EXPECT_EQ(search_code(q, 101, lo, hi), kBad);                        // k > capacity
  EXPECT_EQ(search_code(RandomUnit({3, 3, 16}), 4, lo, hi), kBad);     // heads
  EXPECT_EQ(search_code(RandomUnit({2, 3, 15}), 4, lo, hi), kBad);     // dim
  EXPECT_EQ(search_code(q, 4, Longs({0, 0}), hi), kBad);               // lo length
  EXPECT_EQ(search_code(q, 4, lo, hi.to(torch::kInt32)), kBad);        // hi dtype
  EXPECT_EQ(search_code(q, 4, Longs({0, 40, 0}), Longs({50, 30, 50})), kBad);  // lo > hi
  EXPECT_EQ(search_code(q, 4, lo, hi), absl::StatusCode::kOk);
}

TEST(KnnMemoryTest, NoQueriesOrNoEntriesGiveEmptyOrInvalidResults) {
  auto memory = KnnMemory::Create(SmallConfig(100)).value();
  torch::Tensor none = torch::empty({0}, torch::kInt64);
  // Nothing appended yet: every hit is invalid.
  KnnResult empty_memory =
      memory->Search(RandomUnit({2, 1, 16}), 4, Longs({-10}), Longs({10})).value();
  EXPECT_FALSE(empty_memory.valid.any().item<bool>());
  EXPECT_TRUE(empty_memory.positions.eq(-1).all().item<bool>());
  ASSERT_TRUE(memory->Append(RandomUnit({10, 2, 16}), torch::randn({10, 2, 16})).ok());
  KnnResult no_queries = memory->Search(torch::empty({2, 0, 16}), 4, none, none).value();
  EXPECT_EQ(no_queries.keys.sizes(), torch::IntArrayRef({2, 0, 4, 16}));
  EXPECT_EQ(no_queries.positions.sizes(), torch::IntArrayRef({2, 0, 4}));
}

// SearchOne (the decode hot path) must return Search's hits: same count, same values, the same
// scores up to rounding, best first, through ring growth (1024 -> 2048 -> 3000 entries), FIFO
// wrap-around and windows of every kind.
TEST(KnnMemoryTest, SearchOneMatchesSearchThroughGrowthAndWrapAround) {
  at::manual_seed(3);
  constexpr int64_t kCapacity = 3000, kFirst = 11;
  constexpr int kK = 8;
  auto memory = KnnMemory::Create(SmallConfig(kCapacity, kFirst)).value();
  const std::vector<int64_t> steps = {1, 300, 7, 1000, 64, 1, 513};
  std::vector<KnnMemory::Hit> hits;
  std::vector<std::pair<float, int64_t>> scratch;
  int checks = 0;
  for (int round = 0; memory->next_position() < kFirst + 4 * kCapacity; ++round) {
    const int64_t n = steps[round % steps.size()];
    ASSERT_TRUE(memory->Append(RandomUnit({n, 2, 16}), torch::randn({n, 2, 16})).ok());
    const int64_t next = memory->next_position(), oldest = memory->oldest_position();
    const int64_t early_lo = oldest > kFirst ? oldest : kFirst - 50;
    const int64_t model_lo = std::max(oldest, next - 300);
    const std::vector<std::pair<int64_t, int64_t>> windows = {
        {oldest, next}, {model_lo, std::max(model_lo, next - 40)}, {next - 5, next - 1},
        {next - 3, next - 3}, {oldest + memory->size() / 3, next + 100}, {early_lo, next}};
    for (const auto& [lo, hi] : windows) {
      torch::Tensor query = RandomUnit({2, 1, 16});
      KnnResult found = memory->Search(query, kK, Longs({lo}), Longs({hi})).value();
      ASSERT_TRUE(memory->SearchOne(query.data_ptr<float>(), kK, lo, hi, hits, scratch).ok());
      ASSERT_EQ(hits.size(), 2u * kK);
      for (int64_t h = 0; h < 2; ++h) {
        for (int64_t i = 0; i < kK; ++i) {
          const KnnMemory::Hit& hit = hits[h * kK + i];
          const std::string where = "window [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                    ") head " + std::to_string(h) + " hit " + std::to_string(i);
          ASSERT_EQ(hit.value != nullptr, found.valid[h][0][i].item<bool>()) << where;
          if (hit.value == nullptr) continue;
          EXPECT_NEAR(hit.score, found.scores[h][0][i].item<float>(), 1e-5) << where;
          torch::Tensor value = torch::from_blob(const_cast<float*>(hit.value), {16});
          EXPECT_TRUE(torch::equal(value, found.values[h][0][i])) << where;
          if (i > 0 && hits[h * kK + i - 1].value != nullptr) {
            EXPECT_GE(hits[h * kK + i - 1].score, hit.score) << where;
          }
        }
      }
      ++checks;
    }
  }
  EXPECT_GT(checks, 60);
}

TEST(KnnMemoryTest, SearchOneRejectsWhatSearchRejectsAndIvfMode) {
  auto memory = KnnMemory::Create(SmallConfig(100)).value();
  std::vector<KnnMemory::Hit> hits;
  std::vector<std::pair<float, int64_t>> scratch;
  torch::Tensor q = RandomUnit({2, 1, 16});
  // Nothing appended: every place empty.
  ASSERT_TRUE(memory->SearchOne(q.data_ptr<float>(), 4, -10, 10, hits, scratch).ok());
  EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [](const auto& h) { return h.value == nullptr; }));
  ASSERT_TRUE(memory->Append(RandomUnit({150, 2, 16}), torch::randn({150, 2, 16})).ok());
  const auto kBad = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(memory->SearchOne(q.data_ptr<float>(), 0, 60, 150, hits, scratch).code(), kBad);
  EXPECT_EQ(memory->SearchOne(q.data_ptr<float>(), 101, 60, 150, hits, scratch).code(), kBad);
  EXPECT_EQ(memory->SearchOne(q.data_ptr<float>(), 4, 90, 80, hits, scratch).code(), kBad);
  EXPECT_EQ(memory->SearchOne(q.data_ptr<float>(), 4, 20, 150, hits, scratch).code(), kBad);  // evicted
  EXPECT_TRUE(memory->SearchOne(q.data_ptr<float>(), 4, 50, 150, hits, scratch).ok());

  KnnMemoryConfig ivf = SmallConfig(4000);
  ivf.exact_threshold = 256;
  ivf.nlist = 8;
  auto big = KnnMemory::Create(ivf).value();
  ASSERT_TRUE(big->Append(RandomUnit({300, 2, 16}), torch::randn({300, 2, 16})).ok());
  ASSERT_EQ(big->mode(), KnnMode::kIvf);
  EXPECT_EQ(big->SearchOne(q.data_ptr<float>(), 4, 0, 300, hits, scratch).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace mnemo::knn
