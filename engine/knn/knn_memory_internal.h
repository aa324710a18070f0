// Helpers shared by knn_memory.cc (storage) and knn_memory_search.cc (search); internal to
// engine/knn.
#ifndef MNEMO_ENGINE_KNN_KNN_MEMORY_INTERNAL_H_
#define MNEMO_ENGINE_KNN_KNN_MEMORY_INTERNAL_H_

#include <omp.h>
#include <torch/types.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mnemo::knn::internal {

// Appends or searches of fewer entries/queries (all heads) than this run on the calling thread
// alone (see SerialIfSmall).
inline constexpr int64_t kSerialBelow = 32;

// Runs a decode-sized call single-threaded. A decode step is a dozen small products and scans;
// each one LibTorch or OpenBLAS splits across threads wakes a sleeping OpenMP worker
// (OMP_WAIT_POLICY=PASSIVE), which costs more than the split gains: on the 2-core machine a
// 4096 x 64 matrix-vector product takes 12 us on one thread and 68 us on two. OpenMP's thread
// count is per calling thread, so other threads are unaffected.
class SerialIfSmall {
 public:
  explicit SerialIfSmall(int64_t items)
      : saved_(items < kSerialBelow ? omp_get_max_threads() : 0) {
    if (saved_ > 1) omp_set_num_threads(1);
  }
  ~SerialIfSmall() {
    if (saved_ > 1) omp_set_num_threads(saved_);
  }
  SerialIfSmall(const SerialIfSmall&) = delete;
  SerialIfSmall& operator=(const SerialIfSmall&) = delete;

 private:
  int saved_;
};

inline absl::Status CheckFloatCpu(const torch::Tensor& t, const char* name) {
  if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(name, " is undefined"));
  if (t.scalar_type() != torch::kFloat32 || !t.device().is_cpu()) {
    return absl::InvalidArgumentError(absl::StrCat(name, " must be a float32 CPU tensor"));
  }
  return absl::OkStatus();
}

}  // namespace mnemo::knn::internal

#endif  // MNEMO_ENGINE_KNN_KNN_MEMORY_INTERNAL_H_
