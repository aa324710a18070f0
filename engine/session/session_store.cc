#include "engine/session/session_store.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mnemo::session {

SessionStore::SessionStore(SessionStoreConfig config, MemoryFactory new_memory, Clock clock)
    : config_(std::move(config)), new_memory_(std::move(new_memory)), clock_(std::move(clock)) {}

absl::Status SessionStore::ValidateId(absl::string_view id, size_t max_length) {
  if (id.empty() || id.size() > max_length) {
    return absl::InvalidArgumentError(absl::StrCat("session_id must be 1 to ", max_length,
                                                   " characters long, got ", id.size()));
  }
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) {
      return absl::InvalidArgumentError(
          "session_id may contain only letters, digits, '.', '_' and '-'");
    }
  }
  return absl::OkStatus();
}

absl::Status SessionStore::CheckRememberCapacity(int64_t remember_capacity) const {
  if (remember_capacity < 0 || remember_capacity > config_.max_remember_capacity) {
    return absl::InvalidArgumentError(absl::StrCat(
        "remember_capacity must be in [0, ", config_.max_remember_capacity,
        "] tokens (0 = the server default; mnemo-server --max_remember_capacity), got ",
        remember_capacity));
  }
  return absl::OkStatus();
}

std::string SessionStore::RandomId() {
  uint64_t bits[2];
  size_t filled = 0;
  while (filled < sizeof(bits)) {
    const ssize_t n = getrandom(reinterpret_cast<char*>(bits) + filled, sizeof(bits) - filled, 0);
    // getrandom only fails with EINTR (or ENOSYS on kernels older than 3.17, which Debian 12
    // does not run); a guessable id would be worse than stopping.
    if (n < 0 && errno != EINTR) {
      std::perror("mnemo: getrandom");
      std::abort();
    }
    if (n > 0) filled += static_cast<size_t>(n);
  }
  return absl::StrFormat("%016x%016x", bits[0], bits[1]);
}

std::string SessionStore::NewId() {
  while (true) {
    std::string id = RandomId();
    if (!sessions_.contains(id) && (journal() == nullptr || !journal()->OnDisk(id))) return id;
  }
}

absl::StatusOr<Session*> SessionStore::Create(absl::string_view requested_id,
                                              int64_t knn_capacity, int64_t remember_capacity,
                                              absl::Duration ttl, bool pinned) {
  if (ttl < absl::ZeroDuration() || ttl > config_.max_ttl) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ttl_seconds must be in [0, ", absl::ToInt64Seconds(config_.max_ttl),
        "] (0 = the server's --session_ttl; mnemo-server --max_session_ttl), got ",
        absl::ToInt64Seconds(ttl)));
  }
  if (absl::Status s = CheckRememberCapacity(remember_capacity); !s.ok()) return s;
  if (knn_capacity < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("knn_capacity must be >= 0 (0 = the server default), got ", knn_capacity));
  }
  if (knn_capacity > config_.max_knn_capacity) {
    return absl::InvalidArgumentError(absl::StrCat(
        "knn_capacity ", knn_capacity, " is above this server's cap of ",
        config_.max_knn_capacity, " entries (mnemo-server --max_knn_capacity)"));
  }
  std::string id;
  if (requested_id.empty()) {
    id = NewId();
  } else {
    if (absl::Status s = ValidateId(requested_id); !s.ok()) return s;
    id = std::string(requested_id);
    if (sessions_.contains(id) || (journal() != nullptr && journal()->OnDisk(id))) {
      return absl::AlreadyExistsError(absl::StrCat("session '", id, "' already exists"));
    }
  }

  auto session = std::make_unique<Session>();
  session->id = id;
  session->state.memory = new_memory_(knn_capacity);
  if (remember_capacity > 0) {
    session->state.history = std::make_unique<datastore::HistoryIndex>(remember_capacity);
  }
  session->create_time = clock_();
  session->ttl = ttl;
  session->pinned = pinned;
  return Adopt(std::move(session));
}

absl::StatusOr<Session*> SessionStore::Adopt(std::unique_ptr<Session> session) {
  if (absl::Status s = ValidateId(session->id); !s.ok()) return s;
  if (sessions_.contains(session->id) ||
      (journal() != nullptr && journal()->OnDisk(session->id))) {
    return absl::AlreadyExistsError(absl::StrCat("session '", session->id, "' already exists"));
  }
  session->busy = false;
  session->bytes = session->held_bytes();
  if (absl::Status room = MakeRoom(session->bytes); !room.ok()) return room;
  session->last_use_time = clock_();
  if (journal() != nullptr) {
    if (absl::Status s = journal()->Create(*session); !s.ok()) return s;
  }
  return Insert(std::move(session));
}

absl::Status SessionStore::MakeRoom(int64_t bytes) {
  // Check that the limits can be met by evicting idle sessions before evicting any.
  int64_t idle_count = 0;
  int64_t idle_bytes = 0;
  for (const auto& [unused, s] : sessions_) {
    if (!s->busy && !s->pinned) {
      ++idle_count;
      idle_bytes += s->bytes;
    }
  }
  const int64_t count = static_cast<int64_t>(sessions_.size());
  if (count + 1 > config_.max_sessions && count + 1 - idle_count > config_.max_sessions) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "max_sessions (", config_.max_sessions,
        ") reached and every session is busy or pinned; retry later or raise --max_sessions"));
  }
  if (total_bytes_ - idle_bytes + bytes > config_.max_memory_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "max_memory_bytes (", config_.max_memory_bytes, ") cannot fit a session of ", bytes,
        " bytes beside the busy and pinned ones; retry later or raise the limit"));
  }
  while (static_cast<int64_t>(sessions_.size()) + 1 > config_.max_sessions) {
    Evict(LeastRecentlyUsedIdle(nullptr),
          absl::StrCat("evicted as least recently used (max_sessions ", config_.max_sessions,
                       ")"),
          /*hibernate=*/true);
  }
  while (total_bytes_ + bytes > config_.max_memory_bytes) {
    Evict(LeastRecentlyUsedIdle(nullptr),
          absl::StrCat("evicted as least recently used (max_memory_bytes ",
                       config_.max_memory_bytes, ")"),
          /*hibernate=*/true);
  }
  return absl::OkStatus();
}

Session* SessionStore::Insert(std::unique_ptr<Session> session) {
  session->last_use_seq = ++use_seq_;
  total_bytes_ += session->bytes;
  evicted_reason_.erase(session->id);  // the id is live again
  Session* raw = session.get();
  const std::string id = session->id;
  sessions_.emplace(id, std::move(session));
  return raw;
}

absl::StatusOr<Session*> SessionStore::Find(absl::string_view id) {
  // Ids name files under --session_dir: a malformed one never reaches the journal.
  if (absl::Status s = ValidateId(id); !s.ok()) return s;
  auto it = sessions_.find(id);
  if (it != sessions_.end()) return it->second.get();
  if (journal() != nullptr && journal()->OnDisk(id)) {
    absl::StatusOr<std::unique_ptr<Session>> loaded = journal()->Load(
        id, [this](int64_t knn_len) { return new_memory_(knn_len); });
    if (!loaded.ok()) return loaded.status();
    (*loaded)->bytes = (*loaded)->held_bytes();
    if (absl::Status room = MakeRoom((*loaded)->bytes); !room.ok()) {
      journal()->Release(**loaded, /*compact=*/false).IgnoreError();
      return room;
    }
    return Insert(std::move(*loaded));
  }
  auto why = evicted_reason_.find(id);
  if (why != evicted_reason_.end()) {
    return absl::NotFoundError(absl::StrCat("session '", id, "' not found: it was ", why->second));
  }
  return absl::NotFoundError(absl::StrCat("session '", id, "' not found"));
}

absl::Status SessionStore::Delete(absl::string_view id) {
  if (absl::Status s = ValidateId(id); !s.ok()) return s;
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    if (journal() != nullptr && journal()->OnDisk(id)) return journal()->Remove(id);
    return Find(id).status();
  }
  if (it->second->busy) {
    return absl::FailedPreconditionError(
        absl::StrCat("session '", id, "' is busy with a request; delete it when it finishes"));
  }
  if (journal() != nullptr) {
    if (absl::Status s = journal()->Remove(id); !s.ok()) return s;
  }
  total_bytes_ -= it->second->bytes;
  sessions_.erase(it);
  return absl::OkStatus();
}

void SessionStore::Commit(const Session& session, CallKind kind, int64_t tokens_fed,
                          std::function<void(absl::Status)> done) const {
  if (journal() == nullptr) return done(absl::OkStatus());
  journal()->Commit(session, kind, tokens_fed, std::move(done));
}

void SessionStore::Touch(Session& session) {
  session.last_use_time = clock_();
  session.last_use_seq = ++use_seq_;
}

void SessionStore::UpdateBytes(Session& session) {
  const int64_t bytes = session.held_bytes();
  total_bytes_ += bytes - session.bytes;
  session.bytes = bytes;
  while (total_bytes_ > config_.max_memory_bytes) {
    Session* victim = LeastRecentlyUsedIdle(&session);
    if (victim == nullptr) break;  // only busy sessions left: tolerate until they finish
    Evict(victim,
          absl::StrCat("evicted as least recently used (max_memory_bytes ",
                       config_.max_memory_bytes, ")"),
          /*hibernate=*/true);
  }
}

int SessionStore::Sweep(absl::Time now) {
  std::vector<Session*> expired, dormant;
  for (const auto& [unused, s] : sessions_) {
    if (s->busy || s->pinned) continue;
    const absl::Duration idle = now - s->last_use_time;
    if (idle > TtlOf(*s)) {
      expired.push_back(s.get());
    } else if (journal() != nullptr && idle > config_.hibernate_after) {
      dormant.push_back(s.get());
    }
  }
  for (Session* s : expired) {
    const bool own = s->ttl > absl::ZeroDuration();
    Evict(s,
          absl::StrCat("expired after being idle for more than ",
                       absl::FormatDuration(TtlOf(*s)), own ? " (its ttl)" : " (session_ttl)"),
          /*hibernate=*/false);
  }
  for (Session* s : dormant) {
    Evict(s, "hibernated", /*hibernate=*/true);
  }
  return static_cast<int>(expired.size());
}

absl::Duration SessionStore::TtlOf(const Session& session) const {
  return session.ttl > absl::ZeroDuration() ? session.ttl : config_.ttl;
}

std::vector<const Session*> SessionStore::List() const {
  std::vector<const Session*> out;
  out.reserve(sessions_.size());
  for (const auto& [unused, s] : sessions_) out.push_back(s.get());
  std::sort(out.begin(), out.end(),
            [](const Session* a, const Session* b) { return a->id < b->id; });
  return out;
}

Session* SessionStore::LeastRecentlyUsedIdle(const Session* keep) const {
  Session* best = nullptr;
  for (const auto& [unused, s] : sessions_) {
    if (s->busy || s->pinned || s.get() == keep) continue;
    if (best == nullptr || s->last_use_seq < best->last_use_seq) best = s.get();
  }
  return best;
}

void SessionStore::Evict(Session* session, std::string reason, bool hibernate) {
  const std::string id = session->id;  // erase destroys the session and its id
  if (journal() == nullptr) {
    Remember(id, std::move(reason));
  } else if (hibernate) {
    // On disk already (every call was committed); folding the log keeps the next load short.
    // A failure leaves the snapshot and log as they were: still loadable.
    journal()->Release(*session, /*compact=*/true).IgnoreError();
  } else {
    if (!journal()->Remove(id).ok()) journal()->Release(*session, false).IgnoreError();
    Remember(id, std::move(reason));
  }
  total_bytes_ -= session->bytes;
  ++evicted_total_;
  sessions_.erase(id);
}

void SessionStore::Remember(const std::string& id, std::string reason) {
  if (config_.remembered_evictions <= 0) return;
  if (!evicted_reason_.contains(id)) evicted_order_.push_back(id);
  evicted_reason_[id] = std::move(reason);
  while (static_cast<int>(evicted_order_.size()) > config_.remembered_evictions) {
    evicted_reason_.erase(evicted_order_.front());
    evicted_order_.pop_front();
  }
}

}  // namespace mnemo::session
