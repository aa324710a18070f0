// SessionDatastore (exact, in-memory) against a brute-force reference, its limit and clones;
// DatastoreCatalog's flag parsing.
#include "engine/datastore/session_datastore.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "absl/strings/match.h"
#include "engine/datastore/datastore_catalog.h"
#include "gtest/gtest.h"

namespace mnemo::datastore {
namespace {

std::vector<int32_t> Values(int64_t n, int32_t offset) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), offset);
  return v;
}

TEST(SessionDatastoreTest, SearchMatchesBruteForceAcrossGrowth) {
  torch::manual_seed(3);
  SessionDatastore store(/*d=*/8, /*max_entries=*/0);
  // Several appends so the buffer grows (1024 first, then doubling) between them.
  std::vector<torch::Tensor> parts;
  int64_t total = 0;
  for (int64_t n : {5, 1500, 700, 1}) {
    torch::Tensor keys = torch::randn({n, 8});
    ASSERT_TRUE(store.Append(keys, Values(n, static_cast<int32_t>(total))).ok());
    parts.push_back(keys);
    total += n;
  }
  EXPECT_EQ(store.entries(), total);
  EXPECT_GE(store.bytes(), total * 9 * 4);
  const torch::Tensor all = torch::cat(parts, 0);  // [total, 8]
  const torch::Tensor queries = torch::randn({6, 8});
  absl::StatusOr<std::vector<std::vector<Hit>>> hits = store.Search(queries, {.k = 5});
  ASSERT_TRUE(hits.ok()) << hits.status();
  ASSERT_EQ(hits->size(), 6u);
  for (int64_t q = 0; q < 6; ++q) {
    torch::Tensor d = (all - queries[q]).pow(2).sum(1);  // [total]
    torch::Tensor order = std::get<1>(d.sort());
    const std::vector<Hit>& got = (*hits)[static_cast<size_t>(q)];
    ASSERT_EQ(got.size(), 5u);
    for (int j = 0; j < 5; ++j) {
      const int64_t want = order[j].item<int64_t>();
      EXPECT_EQ(got[static_cast<size_t>(j)].id, want) << "query " << q << " rank " << j;
      EXPECT_EQ(got[static_cast<size_t>(j)].value, static_cast<int32_t>(want));
      EXPECT_NEAR(got[static_cast<size_t>(j)].distance, d[want].item<float>(), 1e-4);
    }
  }
}

TEST(SessionDatastoreTest, FewerEntriesThanKAndEmpty) {
  SessionDatastore store(4, 0);
  absl::StatusOr<std::vector<std::vector<Hit>>> empty = store.Search(torch::zeros({2, 4}), {});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE((*empty)[0].empty());
  ASSERT_TRUE(store.Append(torch::ones({3, 4}), Values(3, 10)).ok());
  absl::StatusOr<std::vector<std::vector<Hit>>> hits = store.Search(torch::zeros({1, 4}), {});
  ASSERT_TRUE(hits.ok());
  EXPECT_EQ((*hits)[0].size(), 3u);
  EXPECT_FLOAT_EQ((*hits)[0][0].distance, 4.0f);
}

TEST(SessionDatastoreTest, LimitRefusesWholeAppend) {
  SessionDatastore store(4, /*max_entries=*/10);
  ASSERT_TRUE(store.Append(torch::zeros({8, 4}), Values(8, 0)).ok());
  absl::Status over = store.Append(torch::zeros({3, 4}), Values(3, 0));
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(over.message(), "--max_session_datastore_entries")) << over;
  EXPECT_EQ(store.entries(), 8);  // nothing of the refused append was kept
  EXPECT_TRUE(store.Append(torch::zeros({2, 4}), Values(2, 0)).ok());
}

TEST(SessionDatastoreTest, BadShapesAndK) {
  SessionDatastore store(4, 0);
  EXPECT_EQ(store.Append(torch::zeros({2, 5}), Values(2, 0)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Append(torch::zeros({2, 4}), Values(3, 0)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Search(torch::zeros({1, 3}), {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Search(torch::zeros({1, 4}), {.k = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SessionDatastoreTest, CloneIsIndependent) {
  SessionDatastore store(4, 0);
  ASSERT_TRUE(store.Append(torch::ones({2, 4}), Values(2, 0)).ok());
  std::unique_ptr<SessionDatastore> copy = store.Clone();
  ASSERT_TRUE(store.Append(torch::zeros({1, 4}), Values(1, 7)).ok());
  EXPECT_EQ(copy->entries(), 2);
  absl::StatusOr<std::vector<std::vector<Hit>>> hits = copy->Search(torch::zeros({1, 4}), {});
  ASSERT_TRUE(hits.ok());
  for (const Hit& h : (*hits)[0]) EXPECT_NE(h.value, 7);
}

TEST(DatastoreSpecTest, ParsesNameDirAndDefaults) {
  absl::StatusOr<DatastoreSpec> spec =
      ParseDatastoreSpec("wiki=/data/ds,lambda=0.4,k=32,temperature=12.5,nprobe=16");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "wiki");
  EXPECT_EQ(spec->dir, "/data/ds");
  EXPECT_FLOAT_EQ(spec->defaults.lambda, 0.4f);
  EXPECT_EQ(spec->defaults.k, 32);
  EXPECT_FLOAT_EQ(spec->defaults.temperature, 12.5f);
  EXPECT_EQ(spec->defaults.nprobe, 16);
  absl::StatusOr<DatastoreSpec> plain = ParseDatastoreSpec("a.b-c_1=rel/dir");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->defaults.k, KnnLmDefaults().k);
}

TEST(DatastoreSpecTest, RejectsBadValuesNamingTheFlag) {
  for (const char* bad : {"nodir", "=dir", "x=", "session=/d", "bad name=/d", "x=/d,lambda=2",
                          "x=/d,k=0", "x=/d,temperature=-1", "x=/d,colour=red", "x=/d,k=abc"}) {
    absl::StatusOr<DatastoreSpec> spec = ParseDatastoreSpec(bad);
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(absl::StrContains(spec.status().message(), "--datastore")) << spec.status();
  }
}

}  // namespace
}  // namespace mnemo::datastore
