#include "engine/scheduler/thread_plan.h"

#include <algorithm>

namespace mnemo::scheduler {

ThreadPlan ResolveThreadPlan(int64_t streamed_weight_bytes, int cores, int decode_threads,
                             int prefill_threads) {
  const bool large = streamed_weight_bytes > kCacheResidentWeightBytes;
  ThreadPlan plan;
  plan.decode_threads = decode_threads != 0 ? decode_threads : large ? 1 : std::max(cores, 1);
  plan.prefill_threads = prefill_threads != -1 ? prefill_threads : large ? 0 : 1;
  return plan;
}

}  // namespace mnemo::scheduler
