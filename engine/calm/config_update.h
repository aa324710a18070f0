// Stores a calibrated exit threshold in a model directory's config.json.
//
// Edits the JSON in place (other fields, known or not, are kept), checks the result still
// parses as a ModelConfig, and replaces the file atomically (write beside it, then rename).
// Not safe against a concurrent writer of the same file.
#ifndef MNEMO_ENGINE_CALM_CONFIG_UPDATE_H_
#define MNEMO_ENGINE_CALM_CONFIG_UPDATE_H_

#include <string>

#include "absl/status/status.h"

namespace mnemo::calm {

// Sets "exit_threshold" in MODEL_DIR/config.json, rounded to 6 significant digits (so 0.9 is
// written as 0.9, not float's 0.899999976).
absl::Status WriteExitThreshold(const std::string& model_dir, float threshold);

}  // namespace mnemo::calm

#endif  // MNEMO_ENGINE_CALM_CONFIG_UPDATE_H_
