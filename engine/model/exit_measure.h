// ExitMeasure: the CALM confidence measures a token may exit early on (docs/design.md §5), and
// their names in config.json, flags and the API. Plain values; no dependencies. How each measure is
// computed is in exit_confidence.h.
#ifndef MNEMO_ENGINE_MODEL_EXIT_MEASURE_H_
#define MNEMO_ENGINE_MODEL_EXIT_MEASURE_H_

#include <array>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mnemo::model {

enum class ExitMeasure {
  // Top-1 minus top-2 probability of the shared head at that layer ("softmax"). The default.
  kSoftmaxResponse,
  // Hidden-state saturation cos(h_i, h_{i-1}): the layer's output against its input
  // ("saturation").
  kHiddenSaturation,
  // A learned per-layer classifier on the hidden state (ExitClassifier, "classifier"): its
  // estimate of P(this layer's greedy token == the full model's). Only for models with a
  // trained exit_classifier.safetensors.
  kClassifier,
};

inline constexpr std::array<ExitMeasure, 3> kExitMeasures = {
    ExitMeasure::kSoftmaxResponse, ExitMeasure::kHiddenSaturation, ExitMeasure::kClassifier};

// "softmax", "saturation", "classifier".
const char* ExitMeasureName(ExitMeasure measure);
// The inverse of ExitMeasureName; INVALID_ARGUMENT listing the names otherwise.
absl::StatusOr<ExitMeasure> ParseExitMeasure(absl::string_view name);

}  // namespace mnemo::model

#endif  // MNEMO_ENGINE_MODEL_EXIT_MEASURE_H_
