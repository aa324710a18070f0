#include "engine/session/session_store.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace mnemo::session {
namespace {

memory::MemoryShape TinyShape() {
  memory::MemoryShape shape;
  shape.layers = 2;
  shape.heads = 2;
  shape.d_head = 4;
  shape.seg_len = 4;
  shape.mem_len = 4;
  shape.max_distance = 8;
  return shape;
}

class SessionStoreTest : public ::testing::Test {
 protected:
  SessionStore MakeStore(SessionStoreConfig config) {
    return SessionStore(
        config,
        [](int64_t) { return memory::SessionMemory::Create(TinyShape(), torch::kFloat32); },
        [this] { return now_; });
  }
  int64_t SessionBytes() {
    return memory::SessionMemory::Create(TinyShape(), torch::kFloat32).bytes();
  }
  void Advance(absl::Duration d) { now_ += d; }

  absl::Time now_ = absl::FromUnixSeconds(1'000'000);
};

TEST_F(SessionStoreTest, GeneratesUniqueHexIds) {
  SessionStore store = MakeStore({});
  absl::StatusOr<Session*> a = store.Create("");
  absl::StatusOr<Session*> b = store.Create("");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->id.size(), 32u);
  EXPECT_NE((*a)->id, (*b)->id);
  EXPECT_EQ((*a)->id.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ((*a)->create_time, now_);
  EXPECT_EQ(store.size(), 2);
}

TEST_F(SessionStoreTest, ValidatesClientIdsAndRejectsDuplicates) {
  SessionStore store = MakeStore({});
  EXPECT_TRUE(store.Create("chat-42_v1.0").ok());
  EXPECT_EQ(store.Create("chat-42_v1.0").status().code(), absl::StatusCode::kAlreadyExists);
  // Stored ids may be up to 200 characters: the server adds a tenant prefix to the client's
  // (at most 128, checked at the edge).
  for (const std::string& bad : std::vector<std::string>{"has space", "slash/", "\xC3\xA9", std::string(201, 'a')}) {
    absl::Status s = store.Create(bad).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(absl::StrContains(s.message(), "session_id")) << s;
  }
  EXPECT_TRUE(store.Create(std::string(200, 'a')).ok());
  EXPECT_EQ(store.Create("k", /*knn_capacity=*/-1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SessionStoreTest, KnnCapacityAboveTheServerCapIsRejected) {
  SessionStoreConfig config;
  config.max_knn_capacity = 1000;
  SessionStore store = MakeStore(config);
  EXPECT_TRUE(store.Create("at-cap", /*knn_capacity=*/1000).ok());
  absl::Status s = store.Create("above", /*knn_capacity=*/1001).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "--max_knn_capacity")) << s;
  EXPECT_FALSE(store.Find("above").ok()) << "a rejected session must not exist";
}

TEST_F(SessionStoreTest, TtlExpiresIdleSessionsOnly) {
  SessionStoreConfig config;
  config.ttl = absl::Minutes(60);
  SessionStore store = MakeStore(config);
  Session* a = *store.Create("a");
  Session* b = *store.Create("b");
  Session* c = *store.Create("c");
  c->busy = true;
  Advance(absl::Minutes(30));
  store.Touch(*b);
  Advance(absl::Minutes(31));
  EXPECT_EQ(store.Sweep(now_), 1);  // a: idle 61 min; b: 31 min; c: busy
  EXPECT_FALSE(store.Find("a").ok());
  EXPECT_TRUE(store.Find("b").ok());
  EXPECT_TRUE(store.Find("c").ok());
  absl::Status s = store.Find("a").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(s.message(), "expired")) << s;
  EXPECT_EQ(store.evicted_total(), 1);
  Advance(absl::Minutes(30));
  EXPECT_EQ(store.Sweep(now_), 1);  // b
  c->busy = false;
  EXPECT_EQ(store.Sweep(now_), 1);  // c, now idle and old
  EXPECT_EQ(store.size(), 0);
  EXPECT_EQ(store.total_bytes(), 0);
  (void)a;
}

TEST_F(SessionStoreTest, OwnTtlAndPinOverrideTheStoreTtl) {
  SessionStoreConfig config;
  config.ttl = absl::Minutes(10);
  config.max_ttl = absl::Hours(2);
  SessionStore store = MakeStore(config);
  ASSERT_TRUE(store.Create("short", 0, 0, absl::Minutes(1)).ok());
  ASSERT_TRUE(store.Create("default").ok());
  ASSERT_TRUE(store.Create("long", 0, 0, absl::Hours(1)).ok());
  ASSERT_TRUE(store.Create("pinned", 0, 0, absl::ZeroDuration(), /*pinned=*/true).ok());
  EXPECT_EQ(store.Create("too-long", 0, 0, absl::Hours(3)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Create("negative", 0, 0, -absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  Advance(absl::Minutes(2));
  EXPECT_EQ(store.Sweep(now_), 1);
  absl::Status gone = store.Find("short").status();
  EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(gone.message(), "its ttl")) << gone;
  Advance(absl::Minutes(10));
  EXPECT_EQ(store.Sweep(now_), 1);  // "default"
  Advance(absl::Hours(100));
  EXPECT_EQ(store.Sweep(now_), 1);  // "long"; the pinned one never expires
  EXPECT_TRUE(store.Find("pinned").ok());
}

TEST_F(SessionStoreTest, PinnedSessionsAreNeverEvicted) {
  SessionStoreConfig config;
  config.max_sessions = 2;
  SessionStore store = MakeStore(config);
  ASSERT_TRUE(store.Create("pinned", 0, 0, absl::ZeroDuration(), true).ok());
  ASSERT_TRUE(store.Create("a").ok());
  Advance(absl::Seconds(1));
  ASSERT_TRUE(store.Create("b").ok());  // evicts "a", the least recently used unpinned one
  EXPECT_TRUE(store.Find("pinned").ok());
  EXPECT_FALSE(store.Find("a").ok());
  (*store.Find("b"))->busy = true;
  absl::Status full = store.Create("c").status();  // only the pinned and a busy one left
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(full.message(), "pinned")) << full;
}

TEST_F(SessionStoreTest, MaxSessionsEvictsLeastRecentlyUsed) {
  SessionStoreConfig config;
  config.max_sessions = 3;
  SessionStore store = MakeStore(config);
  Session* a = *store.Create("a");
  ASSERT_TRUE(store.Create("b").ok());
  ASSERT_TRUE(store.Create("c").ok());
  store.Touch(*a);  // same timestamp: order of use still decides
  ASSERT_TRUE(store.Create("d").ok());
  absl::Status s = store.Find("b").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(s.message(), "evicted")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "max_sessions")) << s;
  ASSERT_TRUE(store.Create("e").ok());  // c is next
  EXPECT_FALSE(store.Find("c").ok());
  EXPECT_TRUE(store.Find("a").ok());
  EXPECT_EQ(store.size(), 3);
  EXPECT_EQ(store.evicted_total(), 2);
}

TEST_F(SessionStoreTest, BusySessionsAreNeverEvicted) {
  SessionStoreConfig config;
  config.max_sessions = 2;
  SessionStore store = MakeStore(config);
  Session* a = *store.Create("a");
  Session* b = *store.Create("b");
  a->busy = true;
  b->busy = true;
  absl::Status s = store.Create("c").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(s.message(), "max_sessions")) << s;
  EXPECT_EQ(store.size(), 2);
  b->busy = false;
  store.Touch(*b);  // b is the most recent, but the only idle one
  ASSERT_TRUE(store.Create("c").ok());
  EXPECT_TRUE(store.Find("a").ok());
  EXPECT_FALSE(store.Find("b").ok());
}

TEST_F(SessionStoreTest, MemoryLimitEvictsLruAndAccountsBytes) {
  const int64_t bytes = SessionBytes();
  ASSERT_GT(bytes, 0);
  SessionStoreConfig config;
  config.max_memory_bytes = bytes * 5 / 2;  // room for two
  SessionStore store = MakeStore(config);
  ASSERT_TRUE(store.Create("a").ok());
  ASSERT_TRUE(store.Create("b").ok());
  EXPECT_EQ(store.total_bytes(), 2 * bytes);
  EXPECT_EQ((*store.Find("a"))->bytes, bytes);
  ASSERT_TRUE(store.Create("c").ok());
  EXPECT_EQ(store.total_bytes(), 2 * bytes);
  absl::Status s = store.Find("a").status();
  EXPECT_TRUE(absl::StrContains(s.message(), "max_memory_bytes")) << s;
  (*store.Find("b"))->busy = true;
  (*store.Find("c"))->busy = true;
  s = store.Create("d").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(s.message(), "max_memory_bytes")) << s;
  EXPECT_EQ(store.size(), 2);  // a failed create evicts nothing
}

TEST_F(SessionStoreTest, SessionLargerThanTheLimitIsRejected) {
  SessionStoreConfig config;
  config.max_memory_bytes = SessionBytes() - 1;
  SessionStore store = MakeStore(config);
  EXPECT_EQ(store.Create("a").status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(store.total_bytes(), 0);
}

TEST_F(SessionStoreTest, DeleteRefusesBusyAndForgetsIdle) {
  SessionStore store = MakeStore({});
  Session* a = *store.Create("a");
  a->busy = true;
  EXPECT_EQ(store.Delete("a").code(), absl::StatusCode::kFailedPrecondition);
  a->busy = false;
  EXPECT_TRUE(store.Delete("a").ok());
  absl::Status s = store.Find("a").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(absl::StrContains(s.message(), "evicted")) << s;
  EXPECT_EQ(store.Delete("a").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.total_bytes(), 0);
  EXPECT_EQ(store.evicted_total(), 0);
}

TEST_F(SessionStoreTest, ListIsSortedById) {
  SessionStore store = MakeStore({});
  for (const char* id : {"m", "b", "z", "a"}) ASSERT_TRUE(store.Create(id).ok());
  std::string order;
  for (const Session* s : store.List()) order += s->id;
  EXPECT_EQ(order, "abmz");
}

TEST_F(SessionStoreTest, RememberedEvictionsAreBoundedAndIdsReusable) {
  SessionStoreConfig config;
  config.max_sessions = 1;
  config.remembered_evictions = 2;
  SessionStore store = MakeStore(config);
  for (const char* id : {"a", "b", "c", "d"}) ASSERT_TRUE(store.Create(id).ok());
  EXPECT_FALSE(absl::StrContains(store.Find("a").status().message(), "evicted"));
  EXPECT_TRUE(absl::StrContains(store.Find("b").status().message(), "evicted"));
  EXPECT_TRUE(absl::StrContains(store.Find("c").status().message(), "evicted"));
  ASSERT_TRUE(store.Create("b").ok());  // an evicted id can be created again
  EXPECT_TRUE(store.Find("b").ok());
}

TEST_F(SessionStoreTest, CloneIsADeepCopy) {
  SessionStore store = MakeStore({});
  Session* a = *store.Create("a");
  a->state.tokens_seen = 7;
  SequenceState copy = a->state.Clone();
  EXPECT_EQ(copy.tokens_seen, 7);
  EXPECT_EQ(copy.memory.bytes(), a->state.memory.bytes());
  EXPECT_NE(copy.memory.layer(0).k_raw().data_ptr(), a->state.memory.layer(0).k_raw().data_ptr());
}

}  // namespace
}  // namespace mnemo::session

namespace mnemo::session {
namespace {

TEST(SessionIdTest, RandomIdsAre128BitHexAndDistinct) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = SessionStore::RandomId();
    ASSERT_EQ(id.size(), 32u);
    ASSERT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
    ASSERT_TRUE(SessionStore::ValidateId(id).ok());
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 1000u);
}

TEST(SessionIdTest, ClientIdsAreCheckedAgainstTheirLimit) {
  EXPECT_TRUE(SessionStore::ValidateId(std::string(128, 'a'), SessionStore::kMaxIdLength).ok());
  EXPECT_FALSE(SessionStore::ValidateId(std::string(129, 'a'), SessionStore::kMaxIdLength).ok());
  EXPECT_TRUE(SessionStore::ValidateId(std::string(200, 'a')).ok());  // stored: tenant prefix
  EXPECT_FALSE(SessionStore::ValidateId("../x").ok());
  EXPECT_FALSE(SessionStore::ValidateId("").ok());
}

}  // namespace
}  // namespace mnemo::session
