#include "engine/model/exit_measure.h"

#include "absl/strings/str_cat.h"

namespace mnemo::model {

const char* ExitMeasureName(ExitMeasure measure) {
  switch (measure) {
    case ExitMeasure::kSoftmaxResponse:
      return "softmax";
    case ExitMeasure::kHiddenSaturation:
      return "saturation";
    case ExitMeasure::kClassifier:
      return "classifier";
  }
  return "softmax";
}

absl::StatusOr<ExitMeasure> ParseExitMeasure(absl::string_view name) {
  for (ExitMeasure measure : kExitMeasures) {
    if (name == ExitMeasureName(measure)) return measure;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("exit measure must be softmax, saturation or classifier, got '", name, "'"));
}

}  // namespace mnemo::model
