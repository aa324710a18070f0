// ThreadPlan: how a server's cores are spent on decode steps and prefill, chosen by the weights
// a decode step streams when the operator leaves it to the engine (EngineConfig's
// decode_threads 0 and prefill_threads -1).
//
// A small model's decode step (the bundled one: 33 MB of float32 weights, cache-resident) is
// compute-bound: its rows are split into shards, one per core, each on one thread
// (model::ParallelDecoder), and prefill runs on one thread beside them. A large model's step
// (GPT-2 124M: 494 MB) is bound by memory bandwidth: shards would each stream all the weights,
// and a lone row would get one core's bandwidth. So one step, whose large products split their
// columns over the intra-op threads (model::PackedLinear), and prefill on all of them.
// docs/results/peers.md has the measurements behind the threshold.
#ifndef MNEMO_ENGINE_SCHEDULER_THREAD_PLAN_H_
#define MNEMO_ENGINE_SCHEDULER_THREAD_PLAN_H_

#include <cstdint>

namespace mnemo::scheduler {

// Streamed weight bytes above which a model counts as large: beyond the per-core caches (2 MiB
// of L2 per core on the development machine) and a share of a typical L3.
inline constexpr int64_t kCacheResidentWeightBytes = int64_t{64} << 20;

struct ThreadPlan {
  int decode_threads = 1;   // ParallelDecoder shards (1 = one step on the intra-op threads)
  int prefill_threads = 1;  // OpenMP threads for prefill; 0 = the intra-op setting
};

// decode_threads 0 and prefill_threads -1 are filled in by the model's size; other values are
// the operator's and kept. cores >= 1.
ThreadPlan ResolveThreadPlan(int64_t streamed_weight_bytes, int cores, int decode_threads,
                             int prefill_threads);

}  // namespace mnemo::scheduler

#endif  // MNEMO_ENGINE_SCHEDULER_THREAD_PLAN_H_
