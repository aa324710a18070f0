// SessionJournal: durable sessions in a directory (mnemo-server --session_dir;
// docs/durability.md). For session ID the directory holds
//   ID.snap   the last snapshot (session_snapshot.h), replaced atomically (temp file, fsync,
//             rename, fsync of the directory)
//   ID.log    the records of the calls since that snapshot, appended and fdatasync'ed before
//             the call's result is delivered
//   ID.lock   held with flock(2) by the one server process that has the session loaded: the
//             writer. A process that dies (even by SIGKILL) drops its locks with it.
// Commit after every call that changed a session encodes one log record (a delta; no model
// work to restore) or, when a delta cannot express the change or the log has grown past
// compact_log_bytes, a new snapshot (which starts an empty log). Encoding happens on the
// committing thread (it reads the session); writing, fdatasync and the call's delivery happen
// on the journal's writer thread, which takes every commit queued meanwhile at once and syncs
// each file once for all of them (group commit): the engine's loop thread never waits for the
// disk, and 16 streams finishing together cost one round of fsyncs. Load = snapshot + records.
// A log whose last record is cut short (a crash while appending it, before its call was
// acknowledged) loses that record; any other damage fails the load with DATA_LOSS naming the
// file, and leaves the files as they are for inspection.
//
// Thread-safety: Create, Load, Release, Remove and OnDisk on one thread (the scheduler's loop);
// Commit from any thread, for a session that thread holds (one thread per session at a time,
// as everything else in a session). Commit's `done` runs on the writer thread, in commit order.
// A failed write fails that commit and every later one of the same session already queued
// (their records would continue a state that is not on disk); the session's next commit then
// writes a snapshot.
#ifndef MNEMO_ENGINE_SESSION_SESSION_JOURNAL_H_
#define MNEMO_ENGINE_SESSION_SESSION_JOURNAL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/session/session.h"
#include "engine/session/session_snapshot.h"

namespace mnemo::session {

struct SessionJournalConfig {
  std::string dir;
  std::string model_id;  // written into every file; a file of another model is refused
  // A commit writes a snapshot instead of a record once the log is larger than this.
  int64_t compact_log_bytes = int64_t{64} << 20;
};

// Called from the thread that did the work (metrics).
struct JournalObserver {
  std::function<void(absl::Duration, int64_t bytes)> snapshot;  // a snapshot written
  std::function<void(absl::Duration)> restore;                  // a session loaded
  std::function<void(int64_t bytes)> log_write;                 // a record appended
};

class SessionJournal {
 public:
  // Creates `dir` if needed and counts the sessions in it; loads nothing.
  static absl::StatusOr<std::unique_ptr<SessionJournal>> Open(SessionJournalConfig config,
                                                              JournalObserver observer = {});
  ~SessionJournal();

  // Whether ID.snap exists.
  bool OnDisk(absl::string_view id) const;
  int64_t sessions_on_disk() const { return on_disk_.load(std::memory_order_relaxed); }
  const SessionJournalConfig& config() const { return config_; }

  // A new session: takes its lock and writes its first snapshot. ALREADY_EXISTS when the id is
  // on disk, UNAVAILABLE when another process holds its lock, RESOURCE_EXHAUSTED when the disk
  // is full (nothing is left behind then).
  absl::Status Create(Session& session);
  // Loads the session from disk, taking its lock: NOT_FOUND when it is not on disk,
  // UNAVAILABLE when another process holds it, DATA_LOSS / FAILED_PRECONDITION (damaged
  // files, another model) naming the file and the reason.
  // `new_memory` makes the empty memory the snapshot is read into.
  absl::StatusOr<std::unique_ptr<Session>> Load(absl::string_view id,
                                                const NewMemoryFn& new_memory);
  // Makes the session's current state durable (see the file comment) and then calls `done`
  // with the outcome, on the writer thread: OK once the record (or snapshot) is on disk;
  // RESOURCE_EXHAUSTED when the disk is full (nothing of this call is on disk). `kind` and
  // `tokens_fed` describe the call in its record.
  using CommitDone = std::function<void(absl::Status)>;
  void Commit(const Session& session, CallKind kind, int64_t tokens_fed, CommitDone done);
  // Commit, waiting for the outcome.
  absl::Status CommitNow(const Session& session, CallKind kind, int64_t tokens_fed);
  // Writes a snapshot now (the log starts empty) and waits for it.
  absl::Status Snapshot(const Session& session);
  // The session leaves memory (hibernates) but stays on disk: its queued commits are written,
  // its log is folded into a snapshot if it has records (`compact`), and its lock is released.
  absl::Status Release(const Session& session, bool compact);
  // Deletes the session's files (it must be loaded here, or loadable: its lock is taken).
  absl::Status Remove(absl::string_view id);

 private:
  struct Files;  // a loaded session's files
  struct Job;    // a commit waiting for the writer
  SessionJournal(SessionJournalConfig config, JournalObserver observer);

  std::string PathOf(absl::string_view id, absl::string_view suffix) const;
  absl::StatusOr<int> Lock(absl::string_view id);
  // Writes `bytes` (EncodeSnapshot of `generation`) as the session's snapshot and starts its
  // empty log of that generation; reopens files.log_fd.
  absl::Status WriteSnapshotFiles(absl::string_view id, const std::string& bytes,
                                  int64_t generation, Files& files);
  // Encodes a snapshot of the session as the next generation (committing thread).
  std::string NextSnapshot(const Session& session, Files& files);
  Files* Find(absl::string_view id) const;
  void Enqueue(Job job);
  // Blocks until every commit queued before the call has been written and delivered.
  void Flush();
  void WriterLoop();
  // Writer thread: one batch of jobs, written, synced once per file, then delivered.
  void WriteBatch(std::vector<Job>& jobs);

  const SessionJournalConfig config_;
  const JournalObserver observer_;
  std::atomic<int64_t> on_disk_{0};
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Files>> open_ ABSL_GUARDED_BY(mu_);

  absl::Mutex queue_mu_;
  std::vector<Job> queue_ ABSL_GUARDED_BY(queue_mu_);
  uint64_t enqueued_ ABSL_GUARDED_BY(queue_mu_) = 0;  // jobs ever queued
  uint64_t done_ ABSL_GUARDED_BY(queue_mu_) = 0;      // jobs ever delivered
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;
  std::thread writer_;  // last: started once everything above exists
};

}  // namespace mnemo::session

#endif  // MNEMO_ENGINE_SESSION_SESSION_JOURNAL_H_
