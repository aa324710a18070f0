// SessionJournal: durable sessions in a directory (mnemo-server --session_dir;
// docs/durability.md). For session ID the directory holds
//   ID.snap   the last snapshot (session_snapshot.h), replaced atomically (temp file, fsync,
//             rename, fsync of the directory)
//   ID.log    the records of the calls since that snapshot, appended and fdatasync'ed before
//             the call's result is delivered
//   ID.lock   held with flock(2) by the one server process that has the session loaded: the
//             writer. A process that dies (even by SIGKILL) drops its locks with it.
// Commit after every call that changed a session writes one log record (a delta; no model
// work to restore) or, when a delta cannot express the change or the log has grown past
// compact_log_bytes, a new snapshot (which starts an empty log). Load = snapshot + records.
// A log whose last record is cut short (a crash while appending it, before its call was
// acknowledged) loses that record; any other damage fails the load with DATA_LOSS naming the
// file, and leaves the files as they are for inspection.
//
// Thread-safety: Create, Load, Release, Remove and OnDisk on one thread (the scheduler's loop);
// Commit from any thread, for a session that thread holds (one thread per session at a time,
// as everything else in a session).
#ifndef MNEMO_ENGINE_SESSION_SESSION_JOURNAL_H_
#define MNEMO_ENGINE_SESSION_SESSION_JOURNAL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

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
  // Makes the session's current state durable (see the file comment). RESOURCE_EXHAUSTED when
  // the disk is full: then nothing of this call is on disk, and the next commit writes a
  // snapshot. `kind` and `tokens_fed` describe the call in its record.
  absl::Status Commit(const Session& session, CallKind kind, int64_t tokens_fed);
  // Writes a snapshot now (the log starts empty).
  absl::Status Snapshot(const Session& session);
  // The session leaves memory (hibernates) but stays on disk: its log is folded into a
  // snapshot if it has records (`compact`), and its lock is released.
  absl::Status Release(const Session& session, bool compact);
  // Deletes the session's files (it must be loaded here, or loadable: its lock is taken).
  absl::Status Remove(absl::string_view id);

  // Log bytes of a loaded session since its snapshot (tests, compaction).
  int64_t log_bytes(absl::string_view id) const;

 private:
  struct Files;  // a loaded session's files
  SessionJournal(SessionJournalConfig config, JournalObserver observer);

  std::string PathOf(absl::string_view id, absl::string_view suffix) const;
  absl::StatusOr<int> Lock(absl::string_view id);
  absl::Status WriteSnapshot(const Session& session, Files& files);
  Files* Find(absl::string_view id) const;

  const SessionJournalConfig config_;
  const JournalObserver observer_;
  std::atomic<int64_t> on_disk_{0};
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Files>> open_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mnemo::session

#endif  // MNEMO_ENGINE_SESSION_SESSION_JOURNAL_H_
