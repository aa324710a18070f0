// Scoring one document with a Model: total log-probability of its bytes, under a memory mode.
//
// Convention (the server's Score RPC): byte i of a document is scored with the log-probs the
// model emits after being fed [BOS, byte_0 .. byte_{i-1}]; bpb = -sum(logprob) / ln 2 / bytes.
// Every function borrows the model for the call only; the model is not thread-safe, so callers
// run one at a time per Model.
#ifndef MNEMO_ENGINE_EVAL_SCORER_H_
#define MNEMO_ENGINE_EVAL_SCORER_H_

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/model.h"

namespace mnemo::eval {

// Running totals of one mode over one or more documents.
struct ScoreTotals {
  double logprob = 0.0;  // natural log, summed over scored bytes (<= 0)
  int64_t bytes = 0;     // bytes scored
  int64_t layers = 0;    // sum of exit layers (early exit only; else bytes * n_layers)

  double Bpb() const;        // bits per byte; 0 when nothing was scored
  double AvgLayers() const;  // layers / bytes
  void Add(const ScoreTotals& other);
};

struct ScoreOptions {
  int chunk = 4096;  // tokens per Forward call: big calls are fast, results do not depend on it
  // Called after each Forward call with the bytes it scored (progress reporting); may be empty.
  std::function<void(int64_t)> on_progress;
};

// Model inputs for a document: [BOS, b_0 .. b_{n-2}] (n = bytes.size()), so output i
// predicts b_i. Empty for an empty document.
std::vector<int> DocumentInputs(std::string_view bytes);

// Sum of logprobs[i, (uint8)targets[i]] over i. logprobs: [n, vocab] float32 CPU,
// n == targets.size().
double SumTargetLogprobs(const torch::Tensor& logprobs, std::string_view targets);

// The whole document through one memory (created with `memory_options`), in chunks.
// layers = bytes * n_layers.
absl::StatusOr<ScoreTotals> ScoreWithMemory(model::Model& model,
                                            const model::MemoryOptions& memory_options,
                                            std::string_view document,
                                            const ScoreOptions& options = {});

// "No memory": the document cut into seg_len-byte segments, each scored alone with a fresh
// memory, so the first byte of every segment is conditioned on BOS only and byte j of a
// segment on [BOS, its j previous bytes in the segment].
absl::StatusOr<ScoreTotals> ScoreWithoutMemory(model::Model& model, std::string_view document,
                                               const ScoreOptions& options = {});

// Like ScoreWithMemory through Model::ForwardWithExit at `threshold` (> 1 = full depth);
// layers = sum of the 1-based exit layers.
absl::StatusOr<ScoreTotals> ScoreWithExit(model::Model& model,
                                          const model::MemoryOptions& memory_options,
                                          float threshold, std::string_view document,
                                          const ScoreOptions& options = {});

}  // namespace mnemo::eval

#endif  // MNEMO_ENGINE_EVAL_SCORER_H_
