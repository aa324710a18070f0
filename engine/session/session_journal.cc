#include "engine/session/session_journal.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "engine/util/binary_io.h"
#include "engine/util/files.h"
#include "engine/util/status_macros.h"

namespace mnemo::session {
namespace {

constexpr char kLogMagic[8] = {'M', 'N', 'E', 'M', 'O', 'L', 'O', 'G'};
constexpr uint32_t kLogHeaderTag = 1;
constexpr uint32_t kRecordTag = 2;

absl::Status ErrnoStatus(int error, absl::string_view what) {
  const std::string message = absl::StrCat(what, ": ", std::strerror(error));
  if (error == ENOSPC || error == EDQUOT) {
    return absl::ResourceExhaustedError(absl::StrCat(message, " (the session directory's disk "
                                                              "is full)"));
  }
  return absl::InternalError(message);
}

absl::Status WriteAll(int fd, absl::string_view data, absl::string_view path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, absl::StrCat("writing ", path));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("opening ", dir));
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  return rc == 0 ? absl::OkStatus() : ErrnoStatus(error, absl::StrCat("syncing ", dir));
}

// Temp file beside `path`, fsync, rename over `path`, fsync of the directory. On failure the
// temp file is removed and `path` is untouched.
absl::Status WriteFileAtomically(const std::string& dir, const std::string& path,
                                 absl::string_view bytes) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("creating ", tmp));
  absl::Status status = WriteAll(fd, bytes, tmp);
  if (status.ok() && ::fsync(fd) != 0) status = ErrnoStatus(errno, absl::StrCat("syncing ", tmp));
  ::close(fd);
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status = ErrnoStatus(errno, absl::StrCat("renaming ", tmp));
  }
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status;
  }
  return SyncDir(dir);
}

std::string LogHeader(absl::string_view model_id, absl::string_view id, int64_t generation) {
  std::string out(kLogMagic, sizeof(kLogMagic));
  out.append(reinterpret_cast<const char*>(&kSnapshotFormatVersion), 4);
  util::BinaryWriter w;
  w.Bytes(model_id);
  w.Bytes(id);
  w.I64(generation);
  AppendFrame(out, kLogHeaderTag, w.data());
  return out;
}

// Prefixes a status's message with `file` (the code is kept).
absl::Status InFile(const absl::Status& status, absl::string_view id, absl::string_view file) {
  return absl::Status(status.code(),
                      absl::StrCat("session '", id, "': ", file, ": ", status.message()));
}

}  // namespace

struct SessionJournal::Files {
  int lock_fd = -1;
  // The committing thread's (the one holding the session): what the next commit encodes from.
  int64_t generation = 0;  // of the last snapshot encoded
  int64_t log_bytes = 0;   // records encoded since it
  LogMark mark;            // what the next record is a delta from
  // The writer's: the log being appended, and the error that broke it (a commit that failed:
  // later records of this session are dropped with it until a snapshot succeeds).
  int log_fd = -1;
  absl::Status broken;
  // Set by the writer when `broken` is set, read by the committing thread: the next commit
  // must be a snapshot.
  std::atomic<bool> needs_snapshot{false};

  ~Files() {
    if (log_fd >= 0) ::close(log_fd);
    if (lock_fd >= 0) ::close(lock_fd);  // releases the flock
  }
};

struct SessionJournal::Job {
  enum Kind { kRecord, kSnapshot, kBarrier };
  Kind kind = kBarrier;
  std::string id;
  Files* files = nullptr;
  std::string bytes;       // the framed record, or the snapshot
  int64_t generation = 0;  // kSnapshot
  absl::Time encoded;      // kSnapshot: when encoding began (the metric covers encode + write)
  CommitDone done;
};

SessionJournal::SessionJournal(SessionJournalConfig config, JournalObserver observer)
    : config_(std::move(config)), observer_(std::move(observer)), writer_([this] { WriterLoop(); }) {}

SessionJournal::~SessionJournal() {
  {
    absl::MutexLock lock(&queue_mu_);
    stopping_ = true;
  }
  writer_.join();  // the writer finishes what is queued first
}

void SessionJournal::Enqueue(Job job) {
  absl::MutexLock lock(&queue_mu_);
  queue_.push_back(std::move(job));
  ++enqueued_;
}

void SessionJournal::Flush() {
  absl::MutexLock lock(&queue_mu_);
  struct Reached {
    const uint64_t* done;
    uint64_t target;
    static bool Check(Reached* r) { return *r->done >= r->target; }
  } reached{&done_, enqueued_};
  queue_mu_.Await(absl::Condition(&Reached::Check, &reached));
}

void SessionJournal::WriterLoop() {
  while (true) {
    std::vector<Job> jobs;
    {
      absl::MutexLock lock(&queue_mu_);
      queue_mu_.Await(absl::Condition(
          +[](SessionJournal* j) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return !j->queue_.empty() || j->stopping_;
          },
          this));
      if (queue_.empty()) return;  // stopping, and nothing left
      jobs.swap(queue_);
    }
    WriteBatch(jobs);
    absl::MutexLock lock(&queue_mu_);
    done_ += jobs.size();
  }
}

void SessionJournal::WriteBatch(std::vector<Job>& jobs) {
  std::vector<absl::Status> outcome(jobs.size());
  std::vector<Files*> to_sync;
  for (size_t i = 0; i < jobs.size(); ++i) {
    Job& job = jobs[i];
    Files& files = *job.files;
    if (job.kind == Job::kBarrier) continue;
    if (job.kind == Job::kSnapshot) {
      outcome[i] = WriteSnapshotFiles(job.id, job.bytes, job.generation, files);
      if (outcome[i].ok()) {
        files.broken = absl::OkStatus();
        if (observer_.snapshot) {
          observer_.snapshot(absl::Now() - job.encoded, static_cast<int64_t>(job.bytes.size()));
        }
      }
    } else if (!files.broken.ok()) {
      outcome[i] = files.broken;  // it would continue a state that is not on disk
    } else {
      const std::string path = PathOf(job.id, ".log");
      const off_t before = ::lseek(files.log_fd, 0, SEEK_END);
      outcome[i] = WriteAll(files.log_fd, job.bytes, path);
      if (!outcome[i].ok()) {
        if (before >= 0) ::ftruncate(files.log_fd, before);  // no partial record stays
      } else {
        if (std::find(to_sync.begin(), to_sync.end(), &files) == to_sync.end()) {
          to_sync.push_back(&files);
        }
        if (observer_.log_write) observer_.log_write(static_cast<int64_t>(job.bytes.size()));
      }
    }
    if (!outcome[i].ok() && files.broken.ok()) {
      files.broken = outcome[i];
      files.needs_snapshot.store(true, std::memory_order_release);
    }
  }
  // One fdatasync per file for the whole batch (group commit).
  for (Files* files : to_sync) {
    if (::fdatasync(files->log_fd) != 0) {
      const absl::Status error = ErrnoStatus(errno, "syncing a session log");
      for (size_t i = 0; i < jobs.size(); ++i) {
        if (jobs[i].files == files && jobs[i].kind == Job::kRecord && outcome[i].ok()) {
          outcome[i] = error;
        }
      }
      files->broken = error;
      files->needs_snapshot.store(true, std::memory_order_release);
    }
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].done) jobs[i].done(std::move(outcome[i]));
  }
}

absl::StatusOr<std::unique_ptr<SessionJournal>> SessionJournal::Open(
    SessionJournalConfig config, JournalObserver observer) {
  std::error_code error;
  std::filesystem::create_directories(config.dir, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("--session_dir ", config.dir, ": cannot create it: ", error.message()));
  }
  int64_t count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(config.dir, error)) {
    if (entry.path().extension() == ".snap") ++count;
  }
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("--session_dir ", config.dir, ": cannot list it: ", error.message()));
  }
  std::unique_ptr<SessionJournal> journal(
      new SessionJournal(std::move(config), std::move(observer)));
  journal->on_disk_.store(count, std::memory_order_relaxed);
  return journal;
}

std::string SessionJournal::PathOf(absl::string_view id, absl::string_view suffix) const {
  return absl::StrCat(config_.dir, "/", id, suffix);
}

bool SessionJournal::OnDisk(absl::string_view id) const {
  struct stat st;
  return ::stat(PathOf(id, ".snap").c_str(), &st) == 0;
}

SessionJournal::Files* SessionJournal::Find(absl::string_view id) const {
  absl::MutexLock lock(&mu_);
  auto it = open_.find(id);
  return it == open_.end() ? nullptr : it->second.get();
}

absl::StatusOr<int> SessionJournal::Lock(absl::string_view id) {
  const std::string path = PathOf(id, ".lock");
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("opening ", path));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    ::close(fd);
    if (error == EWOULDBLOCK) {
      return absl::UnavailableError(absl::StrCat(
          "session '", id, "' is held by another mnemo-server process (", path,
          " is locked); retry through the router, or once that process releases it"));
    }
    return ErrnoStatus(error, absl::StrCat("locking ", path));
  }
  return fd;
}

std::string SessionJournal::NextSnapshot(const Session& session, Files& files) {
  files.generation += 1;
  files.log_bytes = 0;
  files.mark = MarkSession(session);
  files.needs_snapshot.store(false, std::memory_order_release);
  return EncodeSnapshot(session, config_.model_id, files.generation);
}

absl::Status SessionJournal::WriteSnapshotFiles(absl::string_view id, const std::string& bytes,
                                                int64_t generation, Files& files) {
  MNEMO_RETURN_IF_ERROR(WriteFileAtomically(config_.dir, PathOf(id, ".snap"), bytes));
  // The snapshot holds everything the old log did: a crash from here on finds a log of an
  // older generation and ignores it.
  const std::string log_path = PathOf(id, ".log");
  MNEMO_RETURN_IF_ERROR(
      WriteFileAtomically(config_.dir, log_path, LogHeader(config_.model_id, id, generation)));
  const int fd = ::open(log_path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("opening ", log_path));
  if (files.log_fd >= 0) ::close(files.log_fd);
  files.log_fd = fd;
  return absl::OkStatus();
}

absl::Status SessionJournal::Create(Session& session) {
  if (OnDisk(session.id)) {
    return absl::AlreadyExistsError(absl::StrCat("session '", session.id, "' already exists (on disk in ",
                                                 config_.dir, ")"));
  }
  MNEMO_ASSIGN_OR_RETURN(const int lock_fd, Lock(session.id));
  auto files = std::make_unique<Files>();
  files->lock_fd = lock_fd;
  const absl::Time start = absl::Now();
  const std::string bytes = NextSnapshot(session, *files);
  if (absl::Status s = WriteSnapshotFiles(session.id, bytes, files->generation, *files);
      !s.ok()) {
    ::unlink(PathOf(session.id, ".snap").c_str());
    ::unlink(PathOf(session.id, ".log").c_str());
    return s;
  }
  if (observer_.snapshot) {
    observer_.snapshot(absl::Now() - start, static_cast<int64_t>(bytes.size()));
  }
  on_disk_.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  open_[session.id] = std::move(files);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Session>> SessionJournal::Load(absl::string_view id,
                                                              const NewMemoryFn& new_memory) {
  const absl::Time start = absl::Now();
  if (!OnDisk(id)) return absl::NotFoundError(absl::StrCat("session '", id, "' not found"));
  MNEMO_ASSIGN_OR_RETURN(const int lock_fd, Lock(id));
  auto files = std::make_unique<Files>();
  files->lock_fd = lock_fd;  // released by ~Open on every error below

  const std::string snap_path = PathOf(id, ".snap");
  absl::StatusOr<std::string> snap = util::ReadFile(snap_path);
  if (!snap.ok()) return InFile(snap.status(), id, snap_path);
  SnapshotMeta meta;
  absl::StatusOr<std::unique_ptr<Session>> session =
      DecodeSnapshot(*snap, config_.model_id, new_memory, &meta);
  if (!session.ok()) return InFile(session.status(), id, snap_path);
  if ((*session)->id != id) {
    return InFile(absl::DataLossError(absl::StrCat("it holds session '", (*session)->id, "'")),
                  id, snap_path);
  }
  files->generation = meta.generation;

  // The log: records since the snapshot, if it belongs to this snapshot.
  const std::string log_path = PathOf(id, ".log");
  absl::StatusOr<std::string> log = util::ReadFile(log_path);
  bool fresh_log = !log.ok();  // missing: start one
  size_t good = 0;             // bytes of the log that stay
  if (log.ok()) {
    const absl::string_view bytes = *log;
    if (bytes.size() < sizeof(kLogMagic) + 4 ||
        std::memcmp(bytes.data(), kLogMagic, sizeof(kLogMagic)) != 0) {
      return InFile(absl::DataLossError("not a mnemo session log (bad magic)"), id, log_path);
    }
    size_t pos = sizeof(kLogMagic) + 4;
    absl::StatusOr<Frame> header = ReadFrame(bytes, &pos, "log header");
    if (!header.ok()) return InFile(header.status(), id, log_path);
    util::BinaryReader in(header->payload);
    absl::StatusOr<std::string> model = in.Bytes("log model");
    absl::StatusOr<std::string> log_id = model.ok() ? in.Bytes("log session id") : model.status();
    absl::StatusOr<int64_t> generation = log_id.ok() ? in.I64("log generation") : log_id.status();
    if (!generation.ok()) return InFile(generation.status(), id, log_path);
    if (*model != config_.model_id || *log_id != id) {
      return InFile(absl::FailedPreconditionError(absl::StrCat(
                        "the log belongs to session '", *log_id, "' of model ", *model)),
                    id, log_path);
    }
    if (*generation > meta.generation) {
      return InFile(absl::DataLossError(absl::StrCat("the log continues snapshot generation ",
                                                     *generation, " but ", snap_path, " is ",
                                                     meta.generation)),
                    id, log_path);
    }
    fresh_log = *generation < meta.generation;  // stale: the snapshot already holds it
    good = pos;
    int records = 0;
    while (!fresh_log && pos < bytes.size()) {
      // A record cut short at the end is one whose call never returned: drop it.
      if (FrameCutShort(bytes, pos)) break;
      absl::StatusOr<Frame> frame =
          ReadFrame(bytes, &pos, absl::StrCat("record ", records + 1));
      if (!frame.ok()) return InFile(frame.status(), id, log_path);
      if (frame->tag != kRecordTag) {
        return InFile(absl::DataLossError(absl::StrCat("record ", records + 1, ": bad tag")), id,
                      log_path);
      }
      if (absl::Status s = ApplyLogRecord(frame->payload, **session); !s.ok()) {
        return InFile(absl::Status(s.code(), absl::StrCat("record ", records + 1, ": ",
                                                          s.message())),
                      id, log_path);
      }
      ++records;
      good = pos;
    }
  }
  if (fresh_log) {
    absl::Status s = WriteFileAtomically(config_.dir, log_path,
                                         LogHeader(config_.model_id, id, meta.generation));
    if (!s.ok()) return InFile(s, id, log_path);
    good = 0;
  } else if (good < log->size()) {
    if (::truncate(log_path.c_str(), static_cast<off_t>(good)) != 0) {
      return InFile(ErrnoStatus(errno, "dropping a torn last record"), id, log_path);
    }
  }
  files->log_fd = ::open(log_path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (files->log_fd < 0) return InFile(ErrnoStatus(errno, "opening"), id, log_path);
  files->log_bytes = fresh_log ? 0 : static_cast<int64_t>(good);
  files->mark = MarkSession(**session);
  {
    absl::MutexLock lock(&mu_);
    open_[std::string(id)] = std::move(files);
  }
  if (observer_.restore) observer_.restore(absl::Now() - start);
  return std::move(*session);
}

void SessionJournal::Commit(const Session& session, CallKind kind, int64_t tokens_fed,
                            CommitDone done) {
  Files* files = Find(session.id);
  if (files == nullptr) {
    if (done) {
      done(absl::InternalError(absl::StrCat("session '", session.id, "' is not in the journal")));
    }
    return;
  }
  Job job;
  job.id = session.id;
  job.files = files;
  job.done = std::move(done);
  if (kind == CallKind::kDatastore || files->needs_snapshot.load(std::memory_order_acquire) ||
      files->log_bytes > config_.compact_log_bytes || !CanLogSince(session, files->mark)) {
    job.kind = Job::kSnapshot;
    job.encoded = absl::Now();
    job.bytes = NextSnapshot(session, *files);
    job.generation = files->generation;
  } else {
    job.kind = Job::kRecord;
    job.bytes = EncodeLogRecord(session, files->mark, kind, tokens_fed, kRecordTag);
    files->log_bytes += static_cast<int64_t>(job.bytes.size());
    files->mark = MarkSession(session);
  }
  Enqueue(std::move(job));
}

absl::Status SessionJournal::CommitNow(const Session& session, CallKind kind,
                                       int64_t tokens_fed) {
  absl::Notification written;
  absl::Status status;
  Commit(session, kind, tokens_fed, [&](absl::Status s) {
    status = std::move(s);
    written.Notify();
  });
  written.WaitForNotification();
  return status;
}

absl::Status SessionJournal::Snapshot(const Session& session) {
  Files* files = Find(session.id);
  if (files == nullptr) {
    return absl::InternalError(absl::StrCat("session '", session.id, "' is not in the journal"));
  }
  files->needs_snapshot.store(true, std::memory_order_release);
  return CommitNow(session, CallKind::kScore, 0);
}

absl::Status SessionJournal::Release(const Session& session, bool compact) {
  Files* files = Find(session.id);
  if (files == nullptr) return absl::OkStatus();
  absl::Status status;
  if (compact && (files->log_bytes > 0 || files->needs_snapshot.load())) {
    status = Snapshot(session);
  }
  Flush();  // nothing of this session is left in the queue
  absl::MutexLock lock(&mu_);
  open_.erase(session.id);
  return status;
}

absl::Status SessionJournal::Remove(absl::string_view id) {
  Flush();  // no queued write of this session lands after its files are gone
  std::unique_ptr<Files> files;
  {
    absl::MutexLock lock(&mu_);
    auto it = open_.find(id);
    if (it != open_.end()) {
      files = std::move(it->second);
      open_.erase(it);
    }
  }
  if (files == nullptr) {
    MNEMO_ASSIGN_OR_RETURN(const int lock_fd, Lock(id));
    files = std::make_unique<Files>();
    files->lock_fd = lock_fd;
  }
  const bool existed = OnDisk(id);
  for (const char* suffix : {".snap", ".log", ".lock"}) ::unlink(PathOf(id, suffix).c_str());
  if (existed) on_disk_.fetch_sub(1, std::memory_order_relaxed);
  return SyncDir(config_.dir);
}

}  // namespace mnemo::session
