// Durable sessions through the scheduler (docs/durability.md): a scheduler over a session
// directory is torn down and a new one started on the same directory; sessions come back bit
// for bit (the log-probs of a probe text equal, not merely close), whatever mix of Score,
// Generate, snapshots and log records made them. Damaged, truncated and foreign files fail
// only their own session, with the file named.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/session/session_journal.h"
#include "gtest/gtest.h"
#include "tests/engine/scheduler/scheduler_fixture.h"
#include "tests/engine/tiny_model.h"

namespace mnemo::scheduler {
namespace {

namespace fs = std::filesystem;

constexpr char kProbe[] = "A probe text, scored without changing the session.";

class DurabilityTest : public SchedulerTest {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mnemo_durability_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override {
    scheduler_.reset();
    fs::remove_all(dir_);
  }

  // (Re)starts the scheduler on the session directory (the previous one is torn down first,
  // without any shutdown work: what is on disk is what each call committed).
  void Restart(int max_sessions = 16, int64_t compact_bytes = int64_t{64} << 20,
               const std::string& model_id = "tiny@0000000000000001",
               int64_t knn_exact_threshold = 0) {
    scheduler_.reset();
    SchedulerConfig config = TestConfig();
    config.sessions.max_sessions = max_sessions;
    config.knn.exact_threshold = knn_exact_threshold;
    absl::StatusOr<std::unique_ptr<session::SessionJournal>> journal =
        session::SessionJournal::Open({dir_.string(), model_id, compact_bytes});
    ASSERT_TRUE(journal.ok()) << journal.status();
    config.sessions.journal = std::move(*journal);
    Start(std::move(config),
          model::Model::Random(testing::TinyMemoryModelConfig(), /*seed=*/7));
  }

  absl::StatusOr<SessionInfo> Create(const std::string& id, bool remember) {
    Waiter<absl::StatusOr<SessionInfo>> w;
    engine::CreateSessionOptions options;
    options.session_id = id;
    options.remember = remember;
    scheduler_->CreateSession(options, w.Callback());
    return w.Wait();
  }

  // The session's probe log-probs (exact floats) and tokens_seen.
  std::pair<std::vector<float>, int64_t> Probe(const std::string& id) {
    absl::StatusOr<ScoreResult> r = Score(id, kProbe, /*update_memory=*/false,
                                          /*token_logprobs=*/true);
    EXPECT_TRUE(r.ok()) << r.status();
    absl::StatusOr<SessionInfo> info = GetSession(id);
    EXPECT_TRUE(info.ok()) << info.status();
    return {r.ok() ? r->logprobs : std::vector<float>(), info.ok() ? info->tokens_seen : -1};
  }

  // A history of every kind of call: scores short (log records) and long (past the kNN
  // store's capacity: a snapshot), and greedy generations (batched decode rows).
  void Feed(const std::string& id, int round) {
    ASSERT_TRUE(Score(id, "Short text " + std::to_string(round) + ". ", true).ok());
    Collector c;
    GenerateFinal final = Run(Greedy("Then ", 12, id), c);
    ASSERT_TRUE(final.status.ok()) << final.status;
    if (round % 2 == 1) {
      std::string long_text;
      for (int i = 0; i < 12; ++i) long_text += "line " + std::to_string(round * 100 + i) + "; ";
      ASSERT_TRUE(Score(id, long_text, true).ok());
    }
  }

  fs::path dir_;
};

TEST_F(DurabilityTest, RestartRestoresSessionsBitForBit) {
  Restart();
  ASSERT_TRUE(Create("plain", false).ok());
  ASSERT_TRUE(Create("remembers", true).ok());
  for (int round = 0; round < 5; ++round) {  // odd rounds end with a snapshot, even in records
    Feed("plain", round);
    Feed("remembers", round);
  }
  const auto plain = Probe("plain");
  const auto remembers = Probe("remembers");
  ASSERT_FALSE(plain.first.empty());
  // The last calls were short: log records after a snapshot, not snapshots.
  EXPECT_GT(fs::file_size(dir_ / "plain.log"), 1000u);
  EXPECT_GT(fs::file_size(dir_ / "remembers.log"), 1000u);
  absl::StatusOr<SessionInfo> before = GetSession("remembers");
  ASSERT_TRUE(before.ok());

  Restart();
  EXPECT_EQ(Probe("plain"), plain);
  EXPECT_EQ(Probe("remembers"), remembers);
  absl::StatusOr<SessionInfo> after = GetSession("remembers");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->memory.xl_tokens, before->memory.xl_tokens);
  EXPECT_EQ(after->memory.compressed_slots, before->memory.compressed_slots);
  EXPECT_EQ(after->memory.knn_entries, before->memory.knn_entries);
  EXPECT_EQ(after->memory.remembered_tokens, before->memory.remembered_tokens);
  EXPECT_EQ(after->create_time, before->create_time);

  // And the restored sessions go on exactly as the originals would have: the same greedy
  // continuation as a session fed the same calls that never left memory.
  Collector restored;
  GenerateFinal final = Run(Greedy("Next ", 16, "plain"), restored);
  ASSERT_TRUE(final.status.ok());
  const std::vector<int> continued = restored.ids();

  scheduler_.reset();
  Start(TestConfig(), model::Model::Random(testing::TinyMemoryModelConfig(), 7));
  ASSERT_TRUE(Create("plain", false).ok());
  for (int round = 0; round < 5; ++round) Feed("plain", round);
  EXPECT_EQ(Probe("plain").first, plain.first);
  Collector reference;
  ASSERT_TRUE(Run(Greedy("Next ", 16, "plain"), reference).status.ok());
  EXPECT_EQ(continued, reference.ids());
}

TEST_F(DurabilityTest, EveryCommitASnapshotRestoresTheSame) {
  Restart(16, /*compact_bytes=*/1);  // every commit after the first record folds the log
  ASSERT_TRUE(Create("s", true).ok());
  for (int round = 0; round < 3; ++round) Feed("s", round);
  const auto probe = Probe("s");
  Restart(16, 1);
  EXPECT_EQ(Probe("s"), probe);
}

TEST_F(DurabilityTest, KnnStoreInIvfModeRestoresFromRecords) {
  // The tiny model's kNN store holds 64 entries; past 48 it searches through FAISS IVF.
  constexpr int64_t kThreshold = 48;
  Restart(16, int64_t{64} << 20, "tiny@0000000000000001", kThreshold);
  ASSERT_TRUE(Create("ivf", false).ok());
  Feed("ivf", 1);  // crosses the threshold: a snapshot
  const uintmax_t after_crossing = fs::file_size(dir_ / "ivf.log");
  for (int round = 2; round < 8; round += 2) Feed("ivf", round);  // short calls: records
  EXPECT_GT(fs::file_size(dir_ / "ivf.log"), after_crossing + 1000);
  {  // the snapshot written at the crossing holds FAISS IVF indexes ("IwFl": IndexIVFFlat)
    std::ifstream in(dir_ / "ivf.snap", std::ios::binary);
    const std::string snap((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(snap.find("IwFl"), std::string::npos);
  }
  const auto probe = Probe("ivf");
  Restart(16, int64_t{64} << 20, "tiny@0000000000000001", kThreshold);
  EXPECT_EQ(Probe("ivf"), probe);
  Collector a;
  ASSERT_TRUE(Run(Greedy("Go on ", 12, "ivf"), a).status.ok());
  const std::vector<int> restored = a.ids();

  // The same calls on a session that never left memory continue the same way.
  scheduler_.reset();
  SchedulerConfig config = TestConfig();
  config.knn.exact_threshold = kThreshold;
  Start(std::move(config), model::Model::Random(testing::TinyMemoryModelConfig(), 7));
  ASSERT_TRUE(Create("ivf", false).ok());
  Feed("ivf", 1);
  for (int round = 2; round < 8; round += 2) Feed("ivf", round);
  EXPECT_EQ(Probe("ivf"), probe);
  Collector b;
  ASSERT_TRUE(Run(Greedy("Go on ", 12, "ivf"), b).status.ok());
  EXPECT_EQ(restored, b.ids());
}

TEST_F(DurabilityTest, EvictedSessionsHibernateAndComeBack) {
  Restart(/*max_sessions=*/1);
  ASSERT_TRUE(Create("a", false).ok());
  Feed("a", 0);
  const auto a = Probe("a");
  ASSERT_TRUE(Create("b", false).ok());  // evicts "a" from memory, not from disk
  Feed("b", 1);
  EXPECT_EQ(Probe("a"), a);  // loaded back (and "b" hibernates in turn)
  absl::StatusOr<SessionInfo> b = GetSession("b");
  EXPECT_TRUE(b.ok()) << b.status();
}

TEST_F(DurabilityTest, DeleteRemovesTheFiles) {
  Restart();
  ASSERT_TRUE(Create("gone", false).ok());
  Feed("gone", 0);
  EXPECT_TRUE(fs::exists(dir_ / "gone.snap"));
  Waiter<absl::Status> w;
  scheduler_->DeleteSession("gone", w.Callback());
  ASSERT_TRUE(w.Wait().ok());
  EXPECT_FALSE(fs::exists(dir_ / "gone.snap"));
  EXPECT_FALSE(fs::exists(dir_ / "gone.log"));
  Restart();
  EXPECT_EQ(GetSession("gone").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Create("gone", false).ok());  // the id is free again
}

TEST_F(DurabilityTest, MalformedIdsNeverReachTheDirectory) {
  // A file beside the session directory that a path in an id would name.
  Restart();
  const fs::path canary = dir_.parent_path() / (dir_.filename().string() + "_canary.snap");
  { std::ofstream(canary) << "not mine"; }
  const std::string escape = "../" + dir_.filename().string() + "_canary";
  Waiter<absl::Status> deleted;
  scheduler_->DeleteSession(escape, deleted.Callback());
  EXPECT_EQ(deleted.Wait().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GetSession(escape).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Score(escape, "x", true).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(fs::exists(canary));
  fs::remove(canary);
}

TEST_F(DurabilityTest, DuplicateIdOnDiskIsRefused) {
  Restart();
  ASSERT_TRUE(Create("dup", false).ok());
  Restart();  // "dup" is on disk, not in memory
  EXPECT_EQ(Create("dup", false).status().code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(DurabilityTest, DamagedFilesFailOnlyTheirSession) {
  Restart();
  for (const char* id : {"flipped", "cut", "torn_log", "bad_log", "healthy"}) {
    ASSERT_TRUE(Create(id, false).ok());
    Feed(id, 0);
    Feed(id, 2);  // short calls only: log records after the first snapshot
  }
  const auto healthy = Probe("healthy");
  const int64_t torn_before_last = [&] {
    absl::StatusOr<SessionInfo> info = GetSession("torn_log");
    return info.ok() ? info->tokens_seen : -1;
  }();
  ASSERT_TRUE(Score("torn_log", "One more call.", true).ok());
  scheduler_.reset();

  auto rewrite = [&](const std::string& name, auto edit) {
    const fs::path path = dir_ / name;
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    edit(bytes);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  };
  rewrite("flipped.snap", [](std::string& b) { b[b.size() / 2] ^= 0x5A; });
  rewrite("cut.snap", [](std::string& b) { b.resize(b.size() / 3); });
  rewrite("torn_log.log", [](std::string& b) { b.resize(b.size() - 7); });  // last record torn
  rewrite("bad_log.log", [](std::string& b) { b[b.size() - 40] ^= 0x01; });

  Restart();
  absl::StatusOr<SessionInfo> flipped = GetSession("flipped");
  EXPECT_EQ(flipped.status().code(), absl::StatusCode::kDataLoss) << flipped.status();
  EXPECT_NE(flipped.status().message().find("flipped.snap"), std::string::npos);
  absl::StatusOr<SessionInfo> cut = GetSession("cut");
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kDataLoss) << cut.status();
  EXPECT_NE(cut.status().message().find("truncated"), std::string::npos) << cut.status();
  absl::StatusOr<SessionInfo> bad_log = GetSession("bad_log");
  EXPECT_EQ(bad_log.status().code(), absl::StatusCode::kDataLoss) << bad_log.status();
  EXPECT_NE(bad_log.status().message().find("bad_log.log"), std::string::npos);
  // A torn last record is a call that never returned: the session loads without it.
  absl::StatusOr<SessionInfo> torn = GetSession("torn_log");
  ASSERT_TRUE(torn.ok()) << torn.status();
  EXPECT_EQ(torn->tokens_seen, torn_before_last);
  // Everything else is undisturbed, and the damaged files are left for inspection.
  EXPECT_EQ(Probe("healthy"), healthy);
  EXPECT_TRUE(fs::exists(dir_ / "flipped.snap"));
  Collector c;
  EXPECT_TRUE(Run(Greedy("ok", 4, "healthy"), c).status.ok());
}

TEST_F(DurabilityTest, AnotherModelsSessionsAreRefused) {
  Restart();
  ASSERT_TRUE(Create("s", false).ok());
  Restart(16, int64_t{64} << 20, "other@00000000000000ff");
  absl::StatusOr<SessionInfo> s = GetSession("s");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();
  EXPECT_NE(s.status().message().find("tiny@0000000000000001"), std::string::npos);
}

TEST_F(DurabilityTest, TtlAndPinSurviveARestart) {
  Restart();
  Waiter<absl::StatusOr<SessionInfo>> w;
  engine::CreateSessionOptions options;
  options.session_id = "kept";
  options.ttl = absl::Minutes(5);
  options.pinned = true;
  scheduler_->CreateSession(options, w.Callback());
  ASSERT_TRUE(w.Wait().ok());
  Restart();
  absl::StatusOr<SessionInfo> info = GetSession("kept");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->ttl, absl::Minutes(5));
  EXPECT_TRUE(info->pinned);
}

TEST_F(DurabilityTest, IdleSessionsHibernateAndReleaseTheirLock) {
  scheduler_.reset();
  SchedulerConfig config = TestConfig();  // sweeps every 10 ms
  config.sessions.hibernate_after = absl::Milliseconds(50);
  absl::StatusOr<std::unique_ptr<session::SessionJournal>> journal =
      session::SessionJournal::Open({dir_.string(), "tiny@0000000000000001"});
  ASSERT_TRUE(journal.ok());
  config.sessions.journal = std::move(*journal);
  Start(std::move(config), model::Model::Random(testing::TinyMemoryModelConfig(), 7));
  ASSERT_TRUE(Create("idle", false).ok());
  Feed("idle", 0);
  const auto probe = Probe("idle");
  absl::StatusOr<std::unique_ptr<session::SessionJournal>> other =
      session::SessionJournal::Open({dir_.string(), "tiny@0000000000000001"});
  ASSERT_TRUE(other.ok());
  std::unique_ptr<model::Model> model =
      model::Model::Random(testing::TinyMemoryModelConfig(), 7);
  auto new_memory = [&](int64_t knn_len) {
    model::MemoryOptions options;
    if (knn_len > 0) options.knn_mem_len = static_cast<int>(knn_len);
    return model->NewMemory(options);
  };
  // Once idle for longer than hibernate_after the session leaves memory and its lock: another
  // replica can load it, and finds it exactly as it was.
  absl::StatusOr<std::unique_ptr<session::Session>> taken;
  for (int attempt = 0; attempt < 200; ++attempt) {
    taken = (*other)->Load("idle", new_memory);
    if (taken.ok()) break;
    ASSERT_EQ(taken.status().code(), absl::StatusCode::kUnavailable) << taken.status();
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ((*taken)->state.tokens_seen, probe.second);
  // While the other holds it, this scheduler cannot load it back.
  EXPECT_EQ(GetSession("idle").status().code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE((*other)->Release(**taken, false).ok());
  EXPECT_EQ(Probe("idle"), probe);
}

TEST_F(DurabilityTest, OneWriterPerSession) {
  Restart();
  ASSERT_TRUE(Create("held", false).ok());
  // A second journal on the same directory (another replica) cannot take a loaded session.
  absl::StatusOr<std::unique_ptr<session::SessionJournal>> other =
      session::SessionJournal::Open({dir_.string(), "tiny@0000000000000001"});
  ASSERT_TRUE(other.ok());
  absl::StatusOr<std::unique_ptr<session::Session>> taken = (*other)->Load(
      "held", [](int64_t) { return memory::SessionMemory(); });
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kUnavailable) << taken.status();
  // Once this scheduler lets go (it stops), the other can.
  scheduler_.reset();
  std::unique_ptr<model::Model> model =
      model::Model::Random(testing::TinyMemoryModelConfig(), 7);
  taken = (*other)->Load("held", [&](int64_t knn_len) {
    model::MemoryOptions options;
    if (knn_len > 0) options.knn_mem_len = static_cast<int>(knn_len);
    return model->NewMemory(options);
  });
  EXPECT_TRUE(taken.ok()) << taken.status();
}

// Moving sessions works with or without a session directory: export/import is the snapshot
// format, fork a deep copy.
class SessionTransferTest : public DurabilityTest {
 protected:
  absl::StatusOr<std::string> Export(const std::string& id) {
    Waiter<absl::StatusOr<std::string>> w;
    scheduler_->ExportSession(id, w.Callback());
    return w.Wait();
  }
  absl::StatusOr<SessionInfo> Import(const std::string& bytes, const std::string& id) {
    Waiter<absl::StatusOr<SessionInfo>> w;
    scheduler_->ImportSession(id, bytes, w.Callback());
    return w.Wait();
  }
  absl::StatusOr<SessionInfo> Fork(const std::string& id, const std::string& new_id) {
    Waiter<absl::StatusOr<SessionInfo>> w;
    scheduler_->ForkSession(id, new_id, w.Callback());
    return w.Wait();
  }
  void StartInMemory(const std::string& model_id = "tiny@0000000000000001") {
    scheduler_.reset();
    SchedulerConfig config = TestConfig();
    config.model_id = model_id;
    Start(std::move(config), model::Model::Random(testing::TinyMemoryModelConfig(), 7));
  }
};

TEST_F(SessionTransferTest, ExportedSessionImportsBitForBitElsewhere) {
  StartInMemory();
  ASSERT_TRUE(Create("s", true).ok());
  for (int round = 0; round < 3; ++round) Feed("s", round);
  const auto probe = Probe("s");
  absl::StatusOr<std::string> bytes = Export("s");
  ASSERT_TRUE(bytes.ok()) << bytes.status();

  StartInMemory();  // another server of the same model
  absl::StatusOr<SessionInfo> imported = Import(*bytes, "");
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->session_id, "s");  // the exported id
  EXPECT_EQ(Probe("s"), probe);
  EXPECT_EQ(Import(*bytes, "").status().code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(Import(*bytes, "renamed").ok());
  EXPECT_EQ(Probe("renamed"), probe);
  EXPECT_EQ(Import(*bytes, "bad id!").status().code(), absl::StatusCode::kInvalidArgument);
  std::string damaged = *bytes;
  damaged[damaged.size() / 2] ^= 0x10;
  EXPECT_EQ(Import(damaged, "damaged").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(Import(bytes->substr(0, bytes->size() - 1), "cut").status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(Import("", "empty").status().code(), absl::StatusCode::kDataLoss);

  StartInMemory("other@00000000000000ff");  // another model
  absl::StatusOr<SessionInfo> other = Import(*bytes, "");
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition) << other.status();
}

TEST_F(SessionTransferTest, ImportedAndForkedSessionsAreDurable) {
  Restart();
  ASSERT_TRUE(Create("s", false).ok());
  Feed("s", 0);
  const auto probe = Probe("s");
  absl::StatusOr<std::string> bytes = Export("s");
  ASSERT_TRUE(bytes.ok());
  ASSERT_TRUE(Import(*bytes, "copy").ok());
  ASSERT_TRUE(Fork("s", "branch").ok());
  Restart();
  EXPECT_EQ(Probe("copy"), probe);
  EXPECT_EQ(Probe("branch"), probe);
}

TEST_F(SessionTransferTest, ForkGoesItsOwnWay) {
  StartInMemory();
  ASSERT_TRUE(Create("trunk", true).ok());
  Feed("trunk", 1);
  const auto trunk = Probe("trunk");
  absl::StatusOr<SessionInfo> branch = Fork("trunk", "");
  ASSERT_TRUE(branch.ok()) << branch.status();
  EXPECT_FALSE(branch->session_id.empty());
  EXPECT_EQ(branch->tokens_seen, trunk.second);
  EXPECT_EQ(Probe(branch->session_id), trunk);
  ASSERT_TRUE(Score(branch->session_id, "Only the branch reads this.", true).ok());
  EXPECT_NE(Probe(branch->session_id).first, trunk.first);
  EXPECT_EQ(Probe("trunk"), trunk);  // the source is untouched
  EXPECT_EQ(Fork("trunk", branch->session_id).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(Fork("missing", "x").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace mnemo::scheduler
