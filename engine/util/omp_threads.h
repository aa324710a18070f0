// ScopedOmpThreads: the calling thread's OpenMP thread count (LibTorch's intra-op threads, and
// OpenBLAS's in its OpenMP build) set for a scope and restored after. OpenMP keeps the count per
// thread, so other threads are unaffected: the engine's loop thread can prefill on one core
// while a ParallelDecoder shard or a training loop elsewhere keeps its own setting.
#ifndef MNEMO_ENGINE_UTIL_OMP_THREADS_H_
#define MNEMO_ENGINE_UTIL_OMP_THREADS_H_

#include <ATen/Parallel.h>
#include <omp.h>

namespace mnemo::util {

class ScopedOmpThreads {
 public:
  // threads <= 0: leaves the count as it is.
  explicit ScopedOmpThreads(int threads) {
    if (threads <= 0) return;
    // LibTorch sets a thread's OpenMP count on its first parallel op; do that first, so it
    // does not undo the setting below.
    at::internal::lazy_init_num_threads();
    saved_ = omp_get_max_threads();
    if (saved_ != threads) omp_set_num_threads(threads);
    else saved_ = 0;
  }
  ~ScopedOmpThreads() {
    if (saved_ > 0) omp_set_num_threads(saved_);
  }
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  int saved_ = 0;  // the count to restore; 0 = nothing changed
};

}  // namespace mnemo::util

#endif  // MNEMO_ENGINE_UTIL_OMP_THREADS_H_
