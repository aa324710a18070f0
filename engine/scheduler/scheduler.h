// Scheduler: the engine's loop thread. Owns the model, the SessionStore, the decode workers
// (a util::WorkerPool) and every admitted request (docs/design.md §1, §5).
//
// Each loop iteration: pop the inbox (RequestQueue), answer session operations at once, admit
// Generate/Score/AddToDatastore requests as tasks (one-shot, or behind their session: requests
// on one session run one at a time, in arrival order; SessionQueue), start waiting tasks while
// the running set has room, then run one iteration: PlanIteration decides it from a snapshot
// of the running tasks (every task one unit of work, round-robin, prefills within the budget;
// iteration_plan.h), and the IterationExecutor carries it out (decode tokens in one batched
// step on the workers while the loop thread prefills). Finished tasks release their session to
// the next request waiting for it. Expired sessions are swept periodically and gauges (Stats)
// are published after each iteration.
//
// Threads: the public methods may be called from any thread (they validate, then queue). The
// loop thread owns everything else. Within an iteration it lends the pool's workers a batched
// step's shards (model::ParallelDecoder) and the prompt chunks of Generate tasks
// (Task::PrefillsAnywhere); a task is touched by one thread at a time, and a session's memory
// only by the thread running its task. Callbacks and stream Push run on the loop thread; stream
// Close on the loop thread or, for a request that ends during a prompt chunk (cancelled,
// failed), on the worker that ran it (GenerateStream is thread-safe). With a session journal
// (durable sessions), the result of a call on a session (its callback, or its stream's Close)
// is delivered from the journal's writer thread once the call's commit is on disk. The destructor stops the
// loop and delivers UNAVAILABLE to everything outstanding (streams end with reason kCancelled).
#ifndef MNEMO_ENGINE_SCHEDULER_SCHEDULER_H_
#define MNEMO_ENGINE_SCHEDULER_SCHEDULER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <random>
#include <thread>

#include "absl/status/status.h"
#include "engine/datastore/datastore_catalog.h"
#include "engine/memory/memory_pool.h"
#include "engine/model/batch_decoder.h"
#include "engine/model/model.h"
#include "engine/scheduler/iteration_executor.h"
#include "engine/scheduler/request_queue.h"
#include "engine/scheduler/session_queue.h"
#include "engine/scheduler/task.h"
#include "engine/scheduler/validation.h"
#include "engine/session/session_store.h"
#include "engine/types.h"
#include "engine/util/worker_pool.h"

namespace mnemo::scheduler {

// Per-session kNN memory sizes (entries per head; docs/design.md §3).
struct KnnLimits {
  int64_t default_capacity = 0;  // sessions that ask for 0, and one-shot requests; 0 = model's
  int64_t exact_threshold = 0;   // exact search up to this size, FAISS IVF beyond; 0 = default
};

struct SchedulerConfig {
  RequestLimits limits;
  // Shared kNN-LM datastores (never null; possibly empty) and the id of the model they must
  // match ("name@fingerprint", reported with sessions' private datastores).
  std::shared_ptr<const datastore::DatastoreCatalog> datastores =
      datastore::DatastoreCatalog::Empty();
  std::string model_id;
  int64_t max_session_datastore_entries = int64_t{1} << 20;  // per session; 0 = unbounded
  KnnSearchObserver knn_search_observer;  // called on the loop thread; may be empty
  int max_waiting = 1024;  // queued + parked model-work requests
  int max_running = 64;    // tasks stepped per iteration; more wait their turn
  // Continuous batching: the decode tokens of every running Generate go through one
  // model::BatchDecoder step per iteration (false: each is fed alone, for comparison).
  bool batch_decode = true;
  // A batched step's rows are split into up to this many shards decoded at once, one per
  // thread (model::ParallelDecoder), each at least decode_min_shard_rows rows: the loop thread
  // and decode_threads - 1 workers the scheduler owns, which also take prompt chunks beside the
  // shards. 1 = one BatchDecoder step on the loop thread with LibTorch's intra-op threads.
  int decode_threads = 1;
  int decode_min_shard_rows = 4;
  // OpenMP threads of the loop thread while it prefills (prompt, Score and datastore chunks);
  // 0 = LibTorch's intra-op setting. See EngineConfig::prefill_threads.
  int prefill_threads = 0;
  // Prefill tokens (prompt / Score / datastore chunks of <= seg_len) per iteration beyond the
  // first chunk; the rest wait for the next iteration, first in line, so decoding streams are
  // never stalled behind many new prompts at once.
  int max_prefill_tokens = 512;
  // Called after every batched decode step with its row count (metrics); may be empty.
  std::function<void(int rows)> decode_batch_observer;
  session::SessionStoreConfig sessions;
  KnnLimits knn;
  // Recall history of sessions created with remember that ask for 0 tokens, and of one-shot
  // requests with recall on (docs/recall.md).
  int64_t remember_capacity = int64_t{1} << 20;
  // Sessions' attention rings in float16 (model::MemoryOptions::half_rings).
  bool half_rings = false;
  absl::Duration sweep_interval = absl::Seconds(1);
  // Called on the loop thread and, timing prefill units, on the decode workers: thread-safe.
  session::SessionStore::Clock clock = absl::Now;
  std::string model_name;  // reported in SessionInfo
};

class Scheduler {
 public:
  // Takes the model and starts the loop thread.
  Scheduler(SchedulerConfig config, std::unique_ptr<model::Model> model);
  ~Scheduler();

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Validates and queues; on error nothing is queued and `stream` is untouched. On OK the
  // scheduler delivers exactly one stream->Close().
  absl::Status SubmitGenerate(engine::GenerateOptions options,
                              std::shared_ptr<engine::GenerateStream> stream);
  // Each runs `done` exactly once: inline when validation or admission fails, else on the
  // loop thread. Once `cancelled` answers true the request stops at its next step (waiting or
  // between chunks) with CANCELLED; a Score that updates memory keeps what it read so far.
  void SubmitScore(engine::ScoreOptions options, ScoreDone done, CancelCheck cancelled = {});
  void SubmitAddToDatastore(engine::AddToDatastoreOptions options, AddToDatastoreDone done,
                            CancelCheck cancelled = {});
  // The session's private datastore (empty when nothing was added yet).
  void GetSessionDatastore(std::string session_id, DatastoreDone done);
  void CreateSession(engine::CreateSessionOptions options, SessionDone done);
  void GetSession(std::string session_id, SessionDone done);
  void ListSessions(ListDone done);
  void DeleteSession(std::string session_id, StatusDone done);
  // Moving sessions (docs/durability.md). Export: the session as snapshot bytes (the format of
  // --session_dir's snapshots); FAILED_PRECONDITION while a request runs on it. Import: a new
  // session from such bytes, under `session_id` or, when empty, the id it was exported with;
  // FAILED_PRECONDITION for another model's snapshot, DATA_LOSS for damaged bytes. Fork: a copy
  // of a session under `new_session_id` (empty = generated) that then goes its own way.
  void ExportSession(std::string session_id, BytesDone done);
  void ImportSession(std::string session_id, std::string snapshot, SessionDone done);
  void ForkSession(std::string session_id, std::string new_session_id, SessionDone done);

  engine::EngineStats Stats() const;

 private:
  void Loop();
  // The empty memory of a session with `knn_capacity` kNN entries per head (0 = the default).
  memory::SessionMemory NewSessionMemory(int64_t knn_capacity) const;
  // Validates a call's options and resolves its kNN-LM datastore before it is queued (calling
  // thread); session operations need nothing.
  absl::Status Prepare(GenerateCall& call);
  absl::Status Prepare(ScoreCall& call);
  absl::Status Prepare(AddToDatastoreCall& call);
  // The one path into the inbox: prepares and queues `call`, or fails it (a Generate's error is
  // returned with its stream untouched; a callback gets its error inline).
  absl::Status Enqueue(Call call);
  // Loop thread: model work becomes a task (queued behind its session), session operations
  // are answered at once.
  void Admit(std::unique_ptr<Request> request, absl::Time now);
  void AdmitTask(Request& request, const std::string& session_id, absl::Time now);
  std::unique_ptr<Task> MakeTask(Request& request, uint64_t id, session::Session* session);
  void Answer(CreateSessionCall& call);
  void Answer(GetSessionCall& call);
  void Answer(ListSessionsCall& call);
  void Answer(ExportSessionCall& call);
  void Answer(ImportSessionCall& call);
  void Answer(ForkSessionCall& call);
  void Answer(DeleteSessionCall& call);
  void Answer(GetSessionDatastoreCall& call);
  // Moves parked tasks into the running set while there is room.
  void StartReady();
  // Plans one iteration over the running set (PlanIteration), has the executor carry it out,
  // then releases the finished tasks' sessions and moves the deferred prefills to the front.
  void RunIteration();
  // Finishes waiting tasks whose client cancelled, without waiting for their turn.
  void ReapCancelledWaiting(absl::Time now);
  // Hands the finished task's session to the next task waiting for it, or marks it idle.
  void Release(Task& task);
  void PublishStats();
  // Sums sessions' private datastores into the gauges (O(sessions): on sweeps and deletes).
  void CountSessionDatastores();
  void Shutdown();
  engine::SessionInfo Info(const session::Session& session) const;

  const SchedulerConfig config_;
  RequestQueue inbox_;

  // Loop-thread state.
  std::unique_ptr<model::Model> model_;
  // The decode workers (decode_threads - 1): a batched step's shards (decoder_) and, beside
  // them, prefill units (executor_).
  util::WorkerPool workers_;
  model::ParallelDecoder decoder_;  // borrows *model_ and workers_
  const model::MemoryOptions memory_options_;  // new memories (sessions default to these)
  memory::MemoryPool memory_pool_;  // finished one-shot requests' memories, for the next ones
  IterationExecutor executor_;  // borrows *model_, decoder_, memory_options_ and config_
  session::SessionStore sessions_;
  using TaskList = std::list<std::unique_ptr<Task>>;
  TaskList running_;  // in round-robin order (IterationPlan)
  std::deque<std::unique_ptr<Task>> ready_;  // admitted, session acquired, awaiting a slot
  SessionQueue session_queue_;  // admitted, waiting for their session
  uint64_t next_task_id_ = 1;
  absl::Time last_sweep_;

  std::mt19937_64 seed_rng_;  // seeds for requests that bring none

  std::atomic<int> running_count_{0};
  std::atomic<int> session_count_{0};
  std::atomic<int64_t> session_bytes_{0};
  std::atomic<int64_t> evicted_total_{0};
  std::atomic<int64_t> session_datastore_entries_{0};
  std::atomic<int64_t> session_datastore_bytes_{0};

  std::thread thread_;  // last: starts after everything above is constructed
};

}  // namespace mnemo::scheduler

#endif  // MNEMO_ENGINE_SCHEDULER_SCHEDULER_H_
