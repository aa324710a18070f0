// WorkerPool: a fixed set of worker threads for fork-join rounds: one caller hands worker w a
// job, does its own part meanwhile, and returns when every job has returned. The engine's
// scheduler owns one (its decode workers): model::ParallelDecoder runs a batched step's shards
// on it, and the scheduler's IterationExecutor lends it prefill units alongside.
//
// Why rounds and not a task queue: a decode step is one fork-join over a few threads, run
// hundreds of times a second; a round costs one wake-up per worker and one meeting, and the
// caller knows exactly which worker runs what (each worker keeps its own decoder scratch).
//
// Ownership: owns its threads (started by the constructor, joined by the destructor).
// Thread-safety: Run is called by one thread at a time, never from a worker of the same pool;
// each job runs on its worker thread, the caller's part on the caller's thread.
#ifndef MNEMO_ENGINE_UTIL_WORKER_POOL_H_
#define MNEMO_ENGINE_UTIL_WORKER_POOL_H_

#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"

namespace mnemo::util {

class WorkerPool {
 public:
  // `workers` threads (0: Run does only the caller's part).
  explicit WorkerPool(int workers);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()); }

  // Runs job(w) on worker w for every w < count (count <= size()) while the calling thread
  // runs `on_caller`; returns once all of them have returned. An exception from `on_caller` or
  // a job is rethrown here after every job has returned (the caller's first, else the lowest
  // worker's).
  void Run(int count, absl::FunctionRef<void(int worker)> job,
           absl::FunctionRef<void()> on_caller);

 private:
  struct Slot {
    const absl::FunctionRef<void(int)>* job = nullptr;  // set while pending
    bool pending = false;
    std::exception_ptr error;  // thrown by the job
  };
  void WorkerLoop(int worker);

  std::mutex mu_;
  std::condition_variable work_ready_;  // a job was posted, or stopping_
  std::condition_variable work_done_;   // a job finished
  std::vector<Slot> slots_;             // [workers], guarded by mu_
  bool stopping_ = false;               // guarded by mu_
  std::vector<std::thread> workers_;    // last: started after the state above
};

}  // namespace mnemo::util

#endif  // MNEMO_ENGINE_UTIL_WORKER_POOL_H_
