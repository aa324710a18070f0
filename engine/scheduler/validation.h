// Request validation, run synchronously on the caller's thread before anything is queued.
// Errors are INVALID_ARGUMENT naming the mnemo.v1 proto field at fault.
#ifndef MNEMO_ENGINE_SCHEDULER_VALIDATION_H_
#define MNEMO_ENGINE_SCHEDULER_VALIDATION_H_

#include <array>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/model/exit_measure.h"
#include "engine/model/model.h"
#include "engine/types.h"

namespace mnemo::scheduler {

struct RequestLimits {
  int default_max_new_tokens = 256;  // used when a request says 0
  int max_new_tokens_cap = 4096;
  int max_top_logprobs = 20;
  // Token ids a request names (prompt_token_ids, token_ids, stop_token_ids, logit_bias) must
  // be in [0, vocab_size): the served model's vocabulary. The Scheduler sets it from its model
  // whatever its config says.
  int vocab_size = 0;
};

// What the served model offers for CALM early exit. Fixed when the model is loaded (its
// config.json and exit_classifier.safetensors), so it may be read on any thread.
struct ModelExitInfo {
  model::ExitMeasure default_measure = model::ExitMeasure::kSoftmaxResponse;
  // Calibrated λ per measure, indexed by ExitMeasure; >= 1 = none calibrated.
  std::array<float, model::kExitMeasures.size()> thresholds = {1.0f, 1.0f, 1.0f};
  bool has_classifier = false;

  static ModelExitInfo Of(const model::Model& model);
};

// Checks `options` and resolves max_new_tokens == 0 to the default, and early_exit's measure
// (unset = exit.default_measure) and threshold (unset = that measure's calibrated λ).
// INVALID_ARGUMENT naming early_exit.measure when it is the classifier and the model has none,
// and early_exit.threshold, with the measure, when exits are enabled without a threshold and
// the model has none calibrated for that measure.
absl::Status ValidateGenerate(engine::GenerateOptions& options, const RequestLimits& limits,
                              const ModelExitInfo& exit = {});
// Exactly one of text and token_ids; ids in [0, limits.vocab_size) (the error names the first
// bad one's index and value); a one-shot request's token_ids hold at least 2 ids.
// recall.max_lambda in [0, 1], recall.min_match_bytes in [1, 4096] when set.
absl::Status ValidateRecall(const engine::RecallRequest& recall);
absl::Status ValidateScore(const engine::ScoreOptions& options, const RequestLimits& limits);
// INVALID_ARGUMENT naming `field`[i] and the value of the first id outside [0, vocab_size).
absl::Status ValidateTokenIds(absl::string_view field, absl::Span<const int> ids,
                              int vocab_size);
absl::Status ValidateAddToDatastore(const engine::AddToDatastoreOptions& options);

}  // namespace mnemo::scheduler

#endif  // MNEMO_ENGINE_SCHEDULER_VALIDATION_H_
