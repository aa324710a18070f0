// ParallelDecoder: one batched decode step (BatchDecoder::Step's contract) with the rows split
// into contiguous shards that decode at the same time, one shard per thread: the caller's thread
// and up to `threads - 1` workers of a pool it borrows.
//
// Why shards and not LibTorch's intra-op threads: a decode step is ~200 small ops, and
// splitting each op across cores costs a thread wake-up per op (OpenMP waits passively, see
// engine/util/cpu_backend.h; spinning instead collapses under any other load). A shard is the
// whole step for its rows, so the threads meet once per step; inside a shard every op runs on
// its own thread. Rows are independent (each owns its memory) and the model is only read.
// Shards read the weights once each, so small batches stay in one shard (min_shard_rows).
//
// Results are BatchDecoder::Step's on all the rows at once: every row's computation is the
// same whichever rows share its step (log-probs agree to float rounding of batched matmuls, as
// between any two batch compositions). One difference: knn_lm_keys holds the key of every row
// that asked for one (DecodeRow::knn_lm_key) and zeros for the other rows of a shard where no
// row asked (one BatchDecoder step would also fill in the keys of full-depth rows that did not
// ask).
//
// Threads: the shards run on a util::WorkerPool this decoder borrows (the engine's scheduler
// owns it and lends it prefill work too; see StepAlongside): shard 0 on the caller's thread,
// shard s on worker s - 1.
//
// Ownership: borrows the Model and the pool (both must outlive this); owns one BatchDecoder per
// thread (its scratch). Thread-safety: Step, StepAlongside and RunOnAll are called by one
// thread at a time (the engine's loop thread), and use the pool's workers until they return.
#ifndef MNEMO_ENGINE_MODEL_PARALLEL_DECODER_H_
#define MNEMO_ENGINE_MODEL_PARALLEL_DECODER_H_

#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/model/batch_decoder.h"
#include "engine/model/model.h"
#include "engine/util/worker_pool.h"

namespace mnemo::model {

struct ParallelDecoderOptions {
  BatchDecoderOptions decoder;  // each shard's
  // Shards at most (1 = BatchDecoder on the caller's thread); at most the pool's workers + 1.
  int threads = 1;
  int min_shard_rows = 4;       // a step splits only into shards of at least this many rows
};

class ParallelDecoder {
 public:
  // Uses up to options.threads - 1 of `workers`' threads.
  ParallelDecoder(Model& model, ParallelDecoderOptions options, util::WorkerPool& workers);
  ParallelDecoder(const ParallelDecoder&) = delete;
  ParallelDecoder& operator=(const ParallelDecoder&) = delete;

  // BatchDecoder::Step over `rows`: INVALID_ARGUMENT (nothing changed) for what
  // BatchDecoder::Validate rejects, INTERNAL (memories inconsistent) if LibTorch fails.
  absl::StatusOr<DecodeBatchResult> Step(absl::Span<const DecodeRow> rows);

  // Step, with `work` keeping the other threads busy: the rows decode on the workers alone (up
  // to threads - 1 shards) while the calling thread runs `work` instead of a shard of its own,
  // and each worker runs `work` too once its shard is done (at once when it has none). So
  // `work` runs once on every thread, at the same time: it must be safe to call concurrently
  // (the engine's: prefill jobs taken from a queue the threads share) and must not touch the
  // rows' memories. Returns when the rows are decoded and every call of `work` has returned; an
  // exception from `work` is rethrown here once every thread is done. A step Validate rejects
  // still runs the work (RunOnAll). With no worker (threads == 1): work() on the caller, then
  // Step(rows).
  absl::StatusOr<DecodeBatchResult> StepAlongside(absl::Span<const DecodeRow> rows,
                                                  absl::FunctionRef<void()> work) {
    return StepAlongside(rows, work, work);
  }
  // The same, with the caller's thread running `caller_work` and each worker `worker_work`.
  absl::StatusOr<DecodeBatchResult> StepAlongside(absl::Span<const DecodeRow> rows,
                                                  absl::FunctionRef<void()> caller_work,
                                                  absl::FunctionRef<void()> worker_work);
  // `work` once on every thread (the caller's and each worker's) at the same time; returns when
  // all calls have returned. The same concurrency rules as StepAlongside's.
  void RunOnAll(absl::FunctionRef<void()> work) { RunOnAll(work, work); }
  void RunOnAll(absl::FunctionRef<void()> caller_work, absl::FunctionRef<void()> worker_work);

  // Shards a step of `rows` rows splits into.
  int ShardsFor(int64_t rows) const;
  const ParallelDecoderOptions& options() const { return options_; }

 private:
  // Runs one shard on the calling thread with LibTorch/OpenMP kept to that thread.
  static absl::StatusOr<DecodeBatchResult> RunShard(BatchDecoder& decoder,
                                                     absl::Span<const DecodeRow> rows);

  ParallelDecoderOptions options_;
  util::WorkerPool& workers_;
  std::vector<std::unique_ptr<BatchDecoder>> decoders_;  // [threads]: 0 = the caller's
};

}  // namespace mnemo::model

#endif  // MNEMO_ENGINE_MODEL_PARALLEL_DECODER_H_
