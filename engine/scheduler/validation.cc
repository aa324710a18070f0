#include "engine/scheduler/validation.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/calm/threshold_schedule.h"
#include "engine/session/session_store.h"
#include "engine/tokenizer/utf8.h"

namespace mnemo::scheduler {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", what));
}

absl::Status ValidateSessionField(const std::string& session_id) {
  if (session_id.empty()) return absl::OkStatus();
  return session::SessionStore::ValidateId(session_id);
}

// Checks early_exit against what the model offers and fills in its unset measure and
// threshold (only when enabled: a disabled request keeps them as given).
absl::Status ResolveEarlyExit(engine::EarlyExitOptions& early_exit, const ModelExitInfo& exit) {
  using model::ExitMeasure;
  if (early_exit.threshold.has_value()) {
    const float threshold = *early_exit.threshold;
    if (!(threshold > 0 && threshold <= 1)) {
      return Invalid("early_exit.threshold", absl::StrCat("must be in (0, 1], got ", threshold));
    }
  }
  const ExitMeasure measure = early_exit.measure.value_or(exit.default_measure);
  const char* name = model::ExitMeasureName(measure);
  if (measure == ExitMeasure::kClassifier && !exit.has_classifier) {
    return Invalid(early_exit.measure.has_value() ? "early_exit.measure" : "early_exit",
                   absl::StrCat("needs the ", name, " measure, but the model has no exit "
                                "classifier (train one with mnemo-train --exit_classifier)"));
  }
  if (!early_exit.enabled) return absl::OkStatus();
  early_exit.measure = measure;
  if (!early_exit.threshold.has_value()) {
    const float calibrated = exit.thresholds[static_cast<size_t>(measure)];
    if (!calm::ExitEnabled(calibrated)) {
      return Invalid("early_exit.threshold",
                     absl::StrCat("must be set for measure ", name, ": the model has no "
                                  "calibrated threshold for it (mnemo-calibrate --measure ",
                                  name, " --write)"));
    }
    early_exit.threshold = calibrated;
  }
  return absl::OkStatus();
}

}  // namespace

ModelExitInfo ModelExitInfo::Of(const model::Model& model) {
  ModelExitInfo info;
  info.default_measure = model.config().exit_measure;
  for (model::ExitMeasure measure : model::kExitMeasures) {
    info.thresholds[static_cast<size_t>(measure)] = model.config().ExitThreshold(measure);
  }
  info.has_classifier = model.exit_classifier() != nullptr;
  return info;
}

absl::Status ValidateGenerate(engine::GenerateOptions& options, const RequestLimits& limits,
                              const ModelExitInfo& exit) {
  if (absl::Status s = ValidateSessionField(options.session_id); !s.ok()) return s;
  if (!tokenizer::IsValidUtf8(options.prompt)) return Invalid("prompt", "is not valid UTF-8");
  if (options.prompt.empty() && options.session_id.empty()) {
    return Invalid("prompt", "must not be empty without a session_id");
  }
  if (options.max_new_tokens < 0) {
    return Invalid("max_new_tokens", absl::StrCat("must be >= 0, got ", options.max_new_tokens));
  }
  if (options.max_new_tokens > limits.max_new_tokens_cap) {
    return Invalid("max_new_tokens", absl::StrCat(options.max_new_tokens,
                                                  " exceeds the server cap ",
                                                  limits.max_new_tokens_cap));
  }
  if (options.max_new_tokens == 0) options.max_new_tokens = limits.default_max_new_tokens;

  const engine::SamplingOptions& sampling = options.sampling;
  if (!(sampling.temperature >= 0) || std::isinf(sampling.temperature)) {
    return Invalid("sampling.temperature",
                   absl::StrCat("must be a finite number >= 0, got ", sampling.temperature));
  }
  if (!(sampling.top_p > 0 && sampling.top_p <= 1)) {
    return Invalid("sampling.top_p", absl::StrCat("must be in (0, 1], got ", sampling.top_p));
  }
  if (sampling.top_k < 0) {
    return Invalid("sampling.top_k", absl::StrCat("must be >= 0, got ", sampling.top_k));
  }
  if (!(sampling.repetition_penalty > 0) || std::isinf(sampling.repetition_penalty)) {
    return Invalid("sampling.repetition_penalty",
                   absl::StrCat("must be a finite number > 0, got ",
                                sampling.repetition_penalty));
  }
  if (options.top_logprobs < 0 || options.top_logprobs > limits.max_top_logprobs) {
    return Invalid("logprobs", absl::StrCat("must be in [0, ", limits.max_top_logprobs,
                                            "], got ", options.top_logprobs));
  }
  if (absl::Status s = ResolveEarlyExit(options.early_exit, exit); !s.ok()) return s;
  if (options.early_exit.enabled && options.knn_lm.has_value()) {
    return Invalid("early_exit",
                   "cannot be combined with knn_lm: the kNN-LM key is the last layer's state, "
                   "which a token that exits early never computes");
  }
  for (size_t i = 0; i < options.stop.size(); ++i) {
    if (options.stop[i].empty()) return Invalid(absl::StrCat("stop[", i, "]"), "is empty");
    if (!tokenizer::IsValidUtf8(options.stop[i])) {
      return Invalid(absl::StrCat("stop[", i, "]"), "is not valid UTF-8");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateScore(const engine::ScoreOptions& options) {
  if (absl::Status s = ValidateSessionField(options.session_id); !s.ok()) return s;
  if (options.text.empty()) return Invalid("text", "must not be empty");
  if (!tokenizer::IsValidUtf8(options.text)) return Invalid("text", "is not valid UTF-8");
  return absl::OkStatus();
}

}  // namespace mnemo::scheduler

namespace mnemo::scheduler {

absl::Status ValidateAddToDatastore(const engine::AddToDatastoreOptions& options) {
  if (options.session_id.empty()) {
    return Invalid("session_id", "must name the session whose datastore receives the text");
  }
  if (absl::Status s = session::SessionStore::ValidateId(options.session_id); !s.ok()) return s;
  if (options.text.empty()) return Invalid("text", "must not be empty");
  if (!tokenizer::IsValidUtf8(options.text)) return Invalid("text", "is not valid UTF-8");
  return absl::OkStatus();
}

}  // namespace mnemo::scheduler
