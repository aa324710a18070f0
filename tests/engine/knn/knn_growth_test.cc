// KnnMemory's rings grow on demand: a fresh memory holds nothing, growth is geometric (a few
// copies over a whole history, never one per append), and every result is identical to a
// memory preallocated at full capacity, across each growth boundary, the IVF switch and FIFO
// wrap-around.
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <vector>

#include "engine/knn/clustered_keys.h"
#include "engine/knn/knn_memory.h"
#include "tests/engine/knn/brute_force.h"

namespace mnemo::knn {
namespace {

using testing::BruteForce;
using testing::ExpectWellFormed;
using testing::RandomUnit;

constexpr int kHeads = 2, kDim = 16;

int64_t RingBytes(int64_t entries) { return int64_t{2} * kHeads * entries * kDim * 4; }

KnnMemoryConfig Config(int64_t capacity, bool preallocate, int64_t first_position = 0) {
  KnnMemoryConfig c;
  c.heads = kHeads;
  c.dim = kDim;
  c.capacity = capacity;
  c.first_position = first_position;
  c.preallocate = preallocate;
  return c;
}

// Config with a small IVF index from 1500 entries on (32 lists, 4 probed).
KnnMemoryConfig IvfConfig(int64_t capacity) {
  KnnMemoryConfig c = Config(capacity, false);
  c.exact_threshold = 1500;
  c.nlist = 32;
  c.nprobe = 4;
  return c;
}

// Every field of two results is bit-identical.
void ExpectSameResult(const KnnResult& a, const KnnResult& b) {
  EXPECT_TRUE(torch::equal(a.positions, b.positions)) << a.positions << "\n" << b.positions;
  EXPECT_TRUE(torch::equal(a.valid, b.valid));
  EXPECT_TRUE(torch::equal(a.scores, b.scores));
  EXPECT_TRUE(torch::equal(a.keys, b.keys));
  EXPECT_TRUE(torch::equal(a.values, b.values));
}

// Windows that straddle the growth boundaries (positions 1024, 2048, 4096 after first) and the
// whole retained range, clipped to what is retained.
std::pair<torch::Tensor, torch::Tensor> Windows(const KnnMemory& memory) {
  const int64_t oldest = memory.oldest_position(), next = memory.next_position();
  const int64_t first = memory.config().first_position;
  std::vector<int64_t> lo = {oldest, std::max(oldest, next - 300)};
  std::vector<int64_t> hi = {next, std::max(oldest, next - 40)};
  for (int64_t edge : {1024, 2048, 4096}) {
    const int64_t a = std::clamp(first + edge - 100, oldest, next);
    lo.push_back(a);
    hi.push_back(std::clamp(first + edge + 100, a, next));
  }
  return {torch::tensor(lo, torch::kInt64), torch::tensor(hi, torch::kInt64)};
}

// `a` and `b` give bit-identical top-16 results for clustered queries over a's Windows.
void ExpectSameSearch(const KnnMemory& a, const KnnMemory& b, ClusteredKeys& data) {
  auto [lo, hi] = Windows(a);
  torch::Tensor queries = data.SampleHeads(lo.size(0), kHeads).transpose(0, 1).contiguous();
  auto from_a = a.Search(queries, 16, lo, hi);
  auto from_b = b.Search(queries, 16, lo, hi);
  ASSERT_TRUE(from_a.ok()) << from_a.status();
  ASSERT_TRUE(from_b.ok()) << from_b.status();
  ExpectSameResult(*from_a, *from_b);
}

TEST(KnnGrowthTest, FreshMemoryHoldsNothingAndGrowsGeometrically) {
  // The server's default: 64K entries per head, 4 heads of 64. Preallocated that was ~128 MiB
  // before the session held anything.
  KnnMemoryConfig config;
  config.heads = 4;
  config.dim = 64;
  config.capacity = 70000;
  config.exact_threshold = config.capacity;  // rings only: no IVF lists in bytes()
  auto memory = KnnMemory::Create(config).value();
  EXPECT_EQ(memory->bytes(), 0);
  EXPECT_EQ(memory->allocated(), 0);
  at::manual_seed(1);
  torch::Tensor one = RandomUnit({1, 4, 64}), values = torch::randn({1, 4, 64});
  std::vector<int64_t> allocations;  // each distinct ring size, in order
  int64_t previous_bytes = 0;
  for (int64_t i = 0; i < 75000; ++i) {  // decode-style: one position per append
    ASSERT_TRUE(memory->Append(one, values).ok());
    const int64_t held = memory->size(), allocated = memory->allocated();
    ASSERT_GE(allocated, held);
    // Never more than twice what is held (or the first allocation's 1024 entries).
    ASSERT_LE(allocated, std::max<int64_t>(1024, 2 * held));
    ASSERT_LE(allocated, config.capacity);
    ASSERT_EQ(memory->bytes(), int64_t{2} * 4 * allocated * 64 * 4);
    ASSERT_GE(memory->bytes(), previous_bytes);
    previous_bytes = memory->bytes();
    if (allocations.empty() || allocations.back() != allocated) allocations.push_back(allocated);
  }
  // 1024, 2048, ..., 65536, then the capacity: log2(capacity / 1024) + 1 copies over 75K appends.
  const std::vector<int64_t> expected = {1024, 2048, 4096, 8192, 16384, 32768, 65536, 70000};
  EXPECT_EQ(allocations, expected);
  EXPECT_EQ(memory->size(), 70000);
}

TEST(KnnGrowthTest, ExactResultsMatchPreallocatedAcrossGrowthAndWrapAround) {
  at::manual_seed(2);
  constexpr int64_t kCapacity = 5000, kFirst = 13;
  auto grown = KnnMemory::Create(Config(kCapacity, /*preallocate=*/false, kFirst)).value();
  auto fixed = KnnMemory::Create(Config(kCapacity, /*preallocate=*/true, kFirst)).value();
  EXPECT_EQ(fixed->bytes(), RingBytes(kCapacity));
  EXPECT_EQ(grown->bytes(), 0);
  BruteForce all(kFirst);
  // Uneven appends, many of one position (decode) so that growth happens on single appends too,
  // three times round the ring.
  const std::vector<int64_t> steps = {1, 7, 300, 1, 1, 64, 255, 1, 129, 3, 1, 200};
  std::set<int64_t> allocations;
  int checks = 0;
  for (int round = 0; grown->next_position() < kFirst + 3 * kCapacity; ++round) {
    const int64_t n = steps[round % steps.size()];
    torch::Tensor keys = RandomUnit({n, kHeads, kDim}), values = torch::randn({n, kHeads, kDim});
    ASSERT_TRUE(grown->Append(keys, values).ok());
    ASSERT_TRUE(fixed->Append(keys, values).ok());
    all.Append(keys, values);
    allocations.insert(grown->allocated());
    ASSERT_EQ(grown->size(), fixed->size());
    ASSERT_EQ(grown->oldest_position(), fixed->oldest_position());
    EXPECT_EQ(fixed->bytes(), RingBytes(kCapacity));
    auto [lo, hi] = Windows(*grown);
    torch::Tensor queries = RandomUnit({kHeads, lo.size(0), kDim});
    auto a = grown->Search(queries, 8, lo, hi);
    auto b = fixed->Search(queries, 8, lo, hi);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    ExpectSameResult(*a, *b);
    ExpectWellFormed(*a, queries, lo, hi, all, kFirst);
    ASSERT_TRUE(torch::equal(a->positions, all.Search(queries, 8, lo, hi)));
    ++checks;
  }
  EXPECT_GT(checks, 150);
  EXPECT_EQ(allocations, (std::set<int64_t>{1024, 2048, 4096, kCapacity}));
  EXPECT_EQ(grown->bytes(), fixed->bytes());  // full: the same rings
}

TEST(KnnGrowthTest, IvfResultsMatchPreallocatedAcrossGrowthAndWrapAround) {
  // The threshold is crossed while the rings hold 2048 entries; they grow twice more in IVF
  // mode (the index reads new entries from the grown rings), then wrap.
  at::manual_seed(3);
  constexpr int64_t kCapacity = 6000;
  KnnMemoryConfig config = IvfConfig(kCapacity);
  auto grown = KnnMemory::Create(config).value();
  config.preallocate = true;
  auto fixed = KnnMemory::Create(config).value();
  ClusteredKeys data(/*centres=*/40, kDim, /*noise=*/1.0, /*seed=*/9);
  const std::vector<int64_t> steps = {250, 1, 1, 97, 250, 3};
  std::set<int64_t> allocations;
  int checks = 0;
  for (int round = 0; grown->next_position() < int64_t{5} * kCapacity / 2; ++round) {
    const int64_t n = steps[round % steps.size()];
    torch::Tensor keys = data.SampleHeads(n, kHeads), values = torch::randn({n, kHeads, kDim});
    ASSERT_TRUE(grown->Append(keys, values).ok());
    ASSERT_TRUE(fixed->Append(keys, values).ok());
    ASSERT_EQ(grown->mode(), fixed->mode());
    if (grown->mode() == KnnMode::kExact) continue;
    allocations.insert(grown->allocated());
    ExpectSameSearch(*grown, *fixed, data);
    ++checks;
  }
  EXPECT_GT(checks, 50);
  EXPECT_EQ(allocations, (std::set<int64_t>{2048, 4096, kCapacity}));
  EXPECT_EQ(grown->bytes(), fixed->bytes());
}

TEST(KnnGrowthTest, AppendOneStoresWhatAppendOfOnePositionStores) {
  // Decode's path (plain arrays, one position) against Append's, through ring growth, the
  // switch to IVF at 1500 entries, more growth in IVF mode and wrap-around.
  at::manual_seed(6);
  constexpr int64_t kCapacity = 3000;
  auto by_tensor = KnnMemory::Create(IvfConfig(kCapacity)).value();
  auto by_array = KnnMemory::Create(IvfConfig(kCapacity)).value();
  ClusteredKeys data(/*centres=*/40, kDim, /*noise=*/1.0, /*seed=*/11);
  int checks = 0;
  for (int64_t position = 0; position < int64_t{5} * kCapacity / 2; ++position) {
    torch::Tensor keys = data.SampleHeads(1, kHeads).contiguous();  // [1, H, d]
    torch::Tensor values = torch::randn({1, kHeads, kDim});
    ASSERT_TRUE(by_tensor->Append(keys, values).ok());
    ASSERT_TRUE(by_array->AppendOne(keys.data_ptr<float>(), values.data_ptr<float>()).ok());
    ASSERT_EQ(by_array->next_position(), by_tensor->next_position());
    ASSERT_EQ(by_array->mode(), by_tensor->mode()) << "position " << position;
    ASSERT_EQ(by_array->allocated(), by_tensor->allocated());
    if (position % 97 != 0) continue;
    ExpectSameSearch(*by_tensor, *by_array, data);
    ++checks;
  }
  EXPECT_EQ(by_array->mode(), KnnMode::kIvf);
  EXPECT_EQ(by_array->bytes(), by_tensor->bytes());
  EXPECT_GT(checks, 70);
}

TEST(KnnGrowthTest, CloneMidGrowthIsIdenticalThenIndependent) {
  at::manual_seed(4);
  auto memory = KnnMemory::Create(Config(10000, false)).value();
  ASSERT_TRUE(memory->Append(RandomUnit({1500, kHeads, kDim}), torch::randn({1500, kHeads, kDim}))
                  .ok());
  ASSERT_EQ(memory->allocated(), 2048);
  std::unique_ptr<KnnMemory> copy = memory->Clone();
  EXPECT_EQ(copy->allocated(), 2048);
  EXPECT_EQ(copy->bytes(), memory->bytes());
  // Both grow past 2048 with the same entries: same results.
  torch::Tensor keys = RandomUnit({1000, kHeads, kDim}), values = torch::randn({1000, kHeads, kDim});
  ASSERT_TRUE(memory->Append(keys, values).ok());
  ASSERT_TRUE(copy->Append(keys, values).ok());
  EXPECT_EQ(copy->allocated(), 4096);
  torch::Tensor queries = RandomUnit({kHeads, 3, kDim});
  torch::Tensor lo = torch::tensor({0, 1000, 2000}, torch::kInt64);
  torch::Tensor hi = torch::tensor({2500, 2100, 2500}, torch::kInt64);
  KnnResult before = copy->Search(queries, 16, lo, hi).value();
  ExpectSameResult(memory->Search(queries, 16, lo, hi).value(), before);
  // Growing the original again (a new ring) leaves the copy as it was.
  ASSERT_TRUE(memory->Append(RandomUnit({3000, kHeads, kDim}), torch::randn({3000, kHeads, kDim}))
                  .ok());
  EXPECT_EQ(memory->allocated(), 8192);
  EXPECT_EQ(copy->allocated(), 4096);
  ExpectSameResult(copy->Search(queries, 16, lo, hi).value(), before);
}

TEST(KnnGrowthTest, PreallocationThatCannotFitFailsAtCreate) {
  KnnMemoryConfig config = Config(int64_t{1} << 44, /*preallocate=*/true);  // 2 x 2 PiB
  auto memory = KnnMemory::Create(config);
  EXPECT_EQ(memory.status().code(), absl::StatusCode::kResourceExhausted) << memory.status();
  // Without preallocation the same capacity costs nothing until entries arrive.
  config.preallocate = false;
  auto lazy = KnnMemory::Create(config);
  ASSERT_TRUE(lazy.ok()) << lazy.status();
  EXPECT_EQ((*lazy)->bytes(), 0);
  ASSERT_TRUE((*lazy)->Append(RandomUnit({10, kHeads, kDim}), torch::randn({10, kHeads, kDim})).ok());
  EXPECT_EQ((*lazy)->bytes(), RingBytes(1024));
}

}  // namespace
}  // namespace mnemo::knn
