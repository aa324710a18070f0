// SessionStore: every live session of an engine, with the limits that bound them.
//
// Owns its Sessions (pointers stay valid until the session is deleted or evicted). Limits:
//  - max_sessions: creating one more evicts the least recently used idle session;
//  - max_memory_bytes: the sum of sessions' memory bytes; creating or growing a session
//    evicts least recently used idle sessions until the total fits;
//  - ttl: Sweep() deletes sessions idle for longer.
// Busy sessions (a request running) are never evicted; when only busy sessions could make
// room, Create fails with RESOURCE_EXHAUSTED naming the limit. Lookups of a recently evicted
// id fail with NOT_FOUND saying why it went (a bounded set of ids is remembered).
//
// With a journal (durable sessions, docs/durability.md) every session is also on disk: Create
// writes it there, Find loads a session that is on disk but not in memory (lazily: start-up
// loads nothing), eviction by the limits hibernates (the session leaves memory, stays on disk),
// and only Delete and the TTL remove it from disk.
//
// Thread-safety: none; the engine's loop thread owns the store. Time comes from an injectable
// clock so tests control it.
#ifndef MNEMO_ENGINE_SESSION_SESSION_STORE_H_
#define MNEMO_ENGINE_SESSION_SESSION_STORE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/memory/session_memory.h"
#include "engine/session/session.h"
#include "engine/session/session_journal.h"

namespace mnemo::session {

struct SessionStoreConfig {
  int max_sessions = 1024;
  absl::Duration ttl = absl::Hours(1);  // absl::InfiniteDuration() = never expire
  absl::Duration max_ttl = absl::Hours(24 * 365);  // largest TTL a CreateSession may ask for
  // With a journal: idle sessions hibernate (leave memory, stay on disk, release their lock
  // so that another replica may load them) after this long; infinite = only when the limits
  // need room.
  absl::Duration hibernate_after = absl::InfiniteDuration();
  int64_t max_memory_bytes = int64_t{8} << 30;
  int remembered_evictions = 4096;  // evicted ids kept for the NOT_FOUND message
  int64_t max_knn_capacity = int64_t{1} << 20;  // largest CreateSession knn_capacity
  int64_t max_remember_capacity = int64_t{1} << 24;  // largest CreateSession remember_capacity
  // Durable sessions (docs/durability.md); null = sessions live in memory only.
  std::shared_ptr<SessionJournal> journal;
};

class SessionStore {
 public:
  // Makes the empty memory of a new session; `knn_capacity` 0 = the model's default.
  using MemoryFactory = std::function<memory::SessionMemory(int64_t knn_capacity)>;
  using Clock = std::function<absl::Time()>;

  // `new_memory` makes the empty memory of each new session (Model::NewMemory).
  SessionStore(SessionStoreConfig config, MemoryFactory new_memory, Clock clock = absl::Now);

  SessionStore(const SessionStore&) = delete;
  SessionStore& operator=(const SessionStore&) = delete;

  // The longest id a client may choose; stored ids may be longer by a tenant prefix that the
  // server adds (server/tenants.h), up to kMaxStoredIdLength.
  static constexpr size_t kMaxIdLength = 128;
  static constexpr size_t kMaxStoredIdLength = 200;
  // Ids must match [A-Za-z0-9._-]{1,max_length}; INVALID_ARGUMENT names `session_id`.
  static absl::Status ValidateId(absl::string_view id, size_t max_length = kMaxStoredIdLength);
  // INVALID_ARGUMENT naming remember_capacity outside [0, max_remember_capacity].
  absl::Status CheckRememberCapacity(int64_t remember_capacity) const;
  // 128 bits from the OS's CSPRNG (getrandom) as 32 hex digits: ids are capabilities when
  // the server runs without API keys. Thread-safe.
  static std::string RandomId();
  // A RandomId() that no session (in memory or on disk) has.
  std::string NewId();

  // Creates a session; `id` empty = a generated random hex id. ALREADY_EXISTS for a live id,
  // RESOURCE_EXHAUSTED when no idle session can be evicted to respect the limits.
  // `knn_capacity` sizes the session's kNN memory (0 = the model's default);
  // `remember_capacity` > 0 gives it a recall history of that many tokens (docs/recall.md).
  // `ttl` (zero = config ttl, at most max_ttl) and `pinned` set the session's own expiry.
  absl::StatusOr<Session*> Create(absl::string_view id, int64_t knn_capacity = 0,
                                  int64_t remember_capacity = 0,
                                  absl::Duration ttl = absl::ZeroDuration(), bool pinned = false);
  // Adds a session made elsewhere (an imported snapshot, a fork) under its id, as Create adds
  // a new one (INVALID_ARGUMENT for a bad id, ALREADY_EXISTS, the limits). Its last use is now.
  absl::StatusOr<Session*> Adopt(std::unique_ptr<Session> session);
  // NOT_FOUND (saying "evicted"/"expired" when known). Does not count as a use. With a
  // journal, a session on disk is loaded (its load errors are returned: DATA_LOSS,
  // FAILED_PRECONDITION, UNAVAILABLE when another process holds it).
  absl::StatusOr<Session*> Find(absl::string_view id);
  // NOT_FOUND as Find; FAILED_PRECONDITION while a request runs on the session.
  absl::Status Delete(absl::string_view id);

  // Records a use now (LRU order, TTL).
  void Touch(Session& session);
  // Re-reads the session's memory bytes and evicts other idle sessions (LRU first) while the
  // total exceeds max_memory_bytes. Call after the session's memory may have grown.
  void UpdateBytes(Session& session);
  // Deletes idle sessions unused for longer than their ttl (pinned ones never), hibernates
  // those idle for longer than hibernate_after (with a journal); returns how many expired.
  int Sweep(absl::Time now);

  // Makes the session's current state durable, then calls `done` with the outcome: inline
  // (OK) without a journal, else on the journal's writer thread (SessionJournal::Commit). Safe
  // from the thread that holds the session.
  void Commit(const Session& session, CallKind kind, int64_t tokens_fed,
              std::function<void(absl::Status)> done) const;
  SessionJournal* journal() const { return config_.journal.get(); }

  // Every session in memory, sorted by id.
  std::vector<const Session*> List() const;

  absl::Time Now() const { return clock_(); }
  int size() const { return static_cast<int>(sessions_.size()); }
  int64_t total_bytes() const { return total_bytes_; }
  int64_t evicted_total() const { return evicted_total_; }
  const SessionStoreConfig& config() const { return config_; }

 private:
  absl::Duration TtlOf(const Session& session) const;
  // The least recently used idle, unpinned session other than `keep`, or nullptr.
  Session* LeastRecentlyUsedIdle(const Session* keep) const;
  // Removes `session` from memory and remembers why; with a journal, `hibernate` keeps it on
  // disk (nothing to remember) and otherwise deletes its files.
  void Evict(Session* session, std::string reason, bool hibernate);
  // Makes room for one more session of `bytes` by evicting idle ones (Create's and a load's
  // limits); RESOURCE_EXHAUSTED naming the limit when only busy sessions could make room.
  absl::Status MakeRoom(int64_t bytes);
  // Adds a created or loaded session.
  Session* Insert(std::unique_ptr<Session> session);
  void Remember(const std::string& id, std::string reason);

  const SessionStoreConfig config_;
  const MemoryFactory new_memory_;
  const Clock clock_;
  absl::flat_hash_map<std::string, std::unique_ptr<Session>> sessions_;
  int64_t total_bytes_ = 0;
  int64_t evicted_total_ = 0;
  uint64_t use_seq_ = 0;
  // Recently evicted ids -> why, bounded by remembered_evictions (oldest forgotten first).
  absl::flat_hash_map<std::string, std::string> evicted_reason_;
  std::deque<std::string> evicted_order_;
};

}  // namespace mnemo::session

#endif  // MNEMO_ENGINE_SESSION_SESSION_STORE_H_
