// Stores calibrated exit thresholds (and the default exit measure) in a model directory's
// config.json.
//
// Edits the JSON in place (other fields, known or not, are kept), checks the result still
// parses as a ModelConfig, and replaces the file atomically (write beside it, then rename).
// Not safe against a concurrent writer of the same file.
#ifndef MNEMO_ENGINE_CALM_CONFIG_UPDATE_H_
#define MNEMO_ENGINE_CALM_CONFIG_UPDATE_H_

#include <string>

#include "absl/status/status.h"
#include "engine/model/exit_measure.h"

namespace mnemo::calm {

// Sets the calibrated threshold of `measure` in MODEL_DIR/config.json, rounded to 6
// significant digits (so 0.9 is written as 0.9, not float's 0.899999976): "exit_threshold" for
// softmax response, "exit_thresholds": {NAME: threshold} for the others (ModelConfig).
absl::Status WriteExitThreshold(const std::string& model_dir, float threshold,
                                model::ExitMeasure measure = model::ExitMeasure::kSoftmaxResponse);

// Sets "exit_measure", the measure requests that name none are served with (removed again for
// softmax response, the default, so such a config keeps its old text).
absl::Status WriteDefaultExitMeasure(const std::string& model_dir, model::ExitMeasure measure);

}  // namespace mnemo::calm

#endif  // MNEMO_ENGINE_CALM_CONFIG_UPDATE_H_
