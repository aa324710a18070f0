// Request validation, run synchronously on the caller's thread before anything is queued.
// Errors are INVALID_ARGUMENT naming the mnemo.v1 proto field at fault.
#ifndef MNEMO_ENGINE_SCHEDULER_VALIDATION_H_
#define MNEMO_ENGINE_SCHEDULER_VALIDATION_H_

#include <array>

#include "absl/status/status.h"
#include "engine/model/exit_measure.h"
#include "engine/model/model.h"
#include "engine/types.h"

namespace mnemo::scheduler {

struct RequestLimits {
  int default_max_new_tokens = 256;  // used when a request says 0
  int max_new_tokens_cap = 4096;
  int max_top_logprobs = 20;
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
absl::Status ValidateScore(const engine::ScoreOptions& options);
absl::Status ValidateAddToDatastore(const engine::AddToDatastoreOptions& options);

}  // namespace mnemo::scheduler

#endif  // MNEMO_ENGINE_SCHEDULER_VALIDATION_H_
