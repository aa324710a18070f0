// Scheduler: the engine's loop thread. Owns the model, the SessionStore and every admitted
// request; only it (and the decode workers it lends work to within an iteration) touches them,
// so they need no locks (DESIGN.md §1).
//
// Each loop iteration: pop the inbox (RequestQueue), run session operations at once, admit
// Generate/Score requests (one-shot, or behind their session: requests on one session run one
// at a time, in arrival order), then give every running task one unit of work, round-robin,
// so concurrent streams interleave and a long prompt cannot starve the others. Finished tasks
// release their session to the next request waiting for it. Expired sessions are swept
// periodically and gauges (Stats) are published after each iteration.
//
// Model work runs on the loop thread and the decode workers it lends work to: a batched step's
// shards, and a Generate's prompt chunks (Task::PrefillsAnywhere) that a worker done with its
// rows takes from the iteration's prefills. A task is touched by one thread at a time.
//
// Thread-safety: the public methods may be called from any thread; callbacks and stream Push
// run on the loop thread, stream Close on the loop thread or, for a request that ends during a
// prompt chunk (cancelled, failed), on the worker that ran it (GenerateStream is thread-safe). The destructor stops the loop and delivers UNAVAILABLE to
// everything outstanding (streams end with reason kCancelled).
#ifndef MNEMO_ENGINE_SCHEDULER_SCHEDULER_H_
#define MNEMO_ENGINE_SCHEDULER_SCHEDULER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <random>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "engine/datastore/datastore_catalog.h"
#include "engine/memory/memory_pool.h"
#include "engine/model/batch_decoder.h"
#include "engine/model/model.h"
#include "engine/scheduler/request_queue.h"
#include "engine/scheduler/task.h"
#include "engine/scheduler/validation.h"
#include "engine/session/session_store.h"
#include "engine/types.h"

namespace mnemo::scheduler {

// Per-session kNN memory sizes (entries per head; DESIGN.md §3).
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
  // thread (model::ParallelDecoder), each at least decode_min_shard_rows rows. 1 = one
  // BatchDecoder step on the loop thread with LibTorch's intra-op threads.
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
  // Sessions' attention rings in float16 (model::MemoryOptions::half_rings).
  bool half_rings = false;
  absl::Duration sweep_interval = absl::Seconds(1);
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
  // loop thread.
  void SubmitScore(engine::ScoreOptions options, ScoreDone done);
  void SubmitAddToDatastore(engine::AddToDatastoreOptions options, AddToDatastoreDone done);
  // The session's private datastore (empty when nothing was added yet).
  void GetSessionDatastore(std::string session_id, DatastoreDone done);
  void CreateSession(engine::CreateSessionOptions options, SessionDone done);
  void GetSession(std::string session_id, SessionDone done);
  void ListSessions(ListDone done);
  void DeleteSession(std::string session_id, StatusDone done);

  engine::EngineStats Stats() const;

 private:
  void Loop();
  void Admit(std::unique_ptr<Request> request, absl::Time now);
  void RunSessionOp(Request& request);
  // Moves parked tasks into the running set while there is room.
  void StartReady();
  // One unit of work for every running task (prefills within the budget), then one batched
  // decode step for the tokens they fed; finished ones leave and release their session.
  void RunIteration();
  // Finishes waiting tasks whose client cancelled, without waiting for their turn.
  void ReapCancelledWaiting(absl::Time now);
  void Release(Task& task);
  void PublishStats();
  // Sums sessions' private datastores into the gauges (O(sessions): on sweeps and deletes).
  void CountSessionDatastores();
  void Shutdown();
  engine::SessionInfo Info(const session::Session& session) const;
  // Queues on the inbox or fails `request` inline.
  absl::Status Enqueue(std::unique_ptr<Request> request);

  const SchedulerConfig config_;
  RequestQueue inbox_;

  // Loop-thread state.
  std::unique_ptr<model::Model> model_;
  model::ParallelDecoder decoder_;  // borrows *model_
  const model::MemoryOptions memory_options_;  // new memories (sessions default to these)
  memory::MemoryPool memory_pool_;  // finished one-shot requests' memories, for the next ones
  session::SessionStore sessions_;
  std::list<std::unique_ptr<Task>> running_;
  std::deque<std::unique_ptr<Task>> ready_;  // admitted, session acquired, awaiting a slot
  absl::flat_hash_map<uint64_t, std::unique_ptr<Task>> behind_session_;  // by task id
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
