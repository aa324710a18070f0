// BatchDecoder: one decode step for many sessions at once (continuous batching, docs/design.md §5).
//
// Each row is one session's next token and that session's own memory. The step computes, for
// every row, exactly what Model::Forward({token}, memory, Outputs::kLast) would (or, with an
// exit threshold <= 1, Model::ForwardWithExit({token}, memory, threshold, measure)), and
// leaves every memory exactly as that call would have: the same ring slots, compressed groups
// formed when a row completes one, kNN entries appended. Rows may be at any position, with any
// fill level and kNN store size, and may differ from step to step (rows join and leave freely).
//
// What is batched: the embedding, LayerNorms, the qkv / output / feed-forward matmuls and the
// exit head run once per layer for all rows. Per row: the memory writes, compression inputs,
// kNN store appends and searches (each session owns its store), and the attention itself over
// the visible part of its rings.
//
// CALM per row: after every layer but the last, rows whose threshold is <= 1 get a confidence
// by their own ExitMeasure (exit_confidence.h; each measure is computed once per layer, for
// the active rows, only when some eligible row uses it); a row exits at the first layer where
// confidence >= its threshold. An exited row leaves the attention and feed-forward work of the
// remaining layers, but each of those layers still gets its key/value from the row's exit
// hidden state (state propagation, as ForwardWithExit does), so its later tokens find no
// holes. Its log-probs come from its exit hidden state through the shared head.
//
// Ownership: borrows the Model (must outlive the decoder) and, during Step only, the rows'
// memories (owned by their sessions or requests), each changed through one SegmentWrite per row
// (DecodeStepState). Holds no state between steps besides its options.
// Thread-safety: one thread at a time per decoder: the engine's loop thread, or the decode
// worker a ParallelDecoder gives this decoder's shard (each shard its own BatchDecoder, all
// sharing the Model, which they only read). The memories of one step must not be touched by
// anything else while it runs.
#ifndef MNEMO_ENGINE_MODEL_BATCH_DECODER_H_
#define MNEMO_ENGINE_MODEL_BATCH_DECODER_H_

#include <torch/types.h>

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/memory/session_memory.h"
#include "engine/model/decode_step_state.h"
#include "engine/model/exit_measure.h"
#include "engine/model/model.h"

namespace mnemo::model {

struct DecodeRow {
  int token = 0;  // the session's next input token, in [0, vocab)
  // Borrowed for the step: a batch-1 inference memory from Model::NewMemory (any options), not
  // shared with another row of the same step. Advanced by one position.
  memory::SessionMemory* memory = nullptr;
  float exit_threshold = 2.0f;  // CALM threshold; > 1 = never exit early
  // Also return this row's kNN-LM key (the last layer's post-LayerNorm FFN input, as
  // Model::Forward's knn_lm_keys). The key exists only at full depth, so such a row never
  // exits early whatever its threshold.
  bool knn_lm_key = false;
  // The confidence this row exits on. kClassifier needs a model with an exit classifier.
  ExitMeasure exit_measure = ExitMeasure::kSoftmaxResponse;
};

struct BatchDecoderOptions {
  // kPerRow: the host kernel on the CPU. (It beat a padded layout at every B measured by
  // tools/decode_batch_bench on the 2-core CPU machine, mnemo-stdlib, histories 0..2K, B = 64:
  // 75 vs 323 CPU ms per step; padded copies cost more than the per-row ops they save,
  // because decode attention is bound by memory reads. The padded layout is gone.)
  AttentionLayout layout = AttentionLayout::kPerRow;
};

struct DecodeBatchResult {
  torch::Tensor logprobs;        // [B, vocab] float32 CPU: next-token log-probs, row order
  std::vector<int> exit_layers;  // [B], 1-based; n_layers for a row that never exited early
  // [B, d_model] float32 CPU when any row set knn_lm_key (undefined otherwise): the key of
  // each row that ran to the last layer; zeros for rows that exited early.
  torch::Tensor knn_lm_keys;
};

class BatchDecoder {
 public:
  explicit BatchDecoder(Model& model, BatchDecoderOptions options = {});

  // One decode step for `rows` (B >= 1). INVALID_ARGUMENT (naming the row) for a bad token,
  // the classifier measure on a model without a classifier, a null or repeated memory, or a
  // memory that does not belong to this model (wrong shape, batch != 1, a training memory with
  // a dense kNN ring, a torn memory); nothing is changed then. INTERNAL if LibTorch fails
  // midway: every row's SegmentWrite is abandoned, so no memory advances (segment_write.h), but
  // a row whose kNN store already took the step's entry is left torn
  // (SessionMemory::torn()): clear or discard it.
  absl::StatusOr<DecodeBatchResult> Step(absl::Span<const DecodeRow> rows);

  // The checks Step makes before changing anything (the INVALID_ARGUMENT cases above), for a
  // caller that splits one step's rows across decoders (ParallelDecoder).
  absl::Status Validate(absl::Span<const DecodeRow> rows) const;

  const BatchDecoderOptions& options() const { return options_; }
  void set_options(const BatchDecoderOptions& options) { options_ = options; }

 private:

  Model& model_;
  BatchDecoderOptions options_;
};

}  // namespace mnemo::model

#endif  // MNEMO_ENGINE_MODEL_BATCH_DECODER_H_
