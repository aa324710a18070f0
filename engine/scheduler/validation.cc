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

absl::Status ValidateTokenIds(absl::string_view field, absl::Span<const int> ids,
                              int vocab_size) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return Invalid(absl::StrCat(field, "[", i, "]"),
                     absl::StrCat("= ", ids[i], " is outside the vocabulary [0, ", vocab_size,
                                  ")"));
    }
  }
  return absl::OkStatus();
}

ModelExitInfo ModelExitInfo::Of(const model::Model& model) {
  ModelExitInfo info;
  info.default_measure = model.config().exit_measure;
  for (model::ExitMeasure measure : model::kExitMeasures) {
    info.thresholds[static_cast<size_t>(measure)] = model.config().ExitThreshold(measure);
  }
  info.has_classifier = model.exit_classifier() != nullptr;
  return info;
}

absl::Status ValidateRecall(const engine::RecallRequest& recall) {
  if (recall.max_lambda.has_value() &&
      !(*recall.max_lambda >= 0.0f && *recall.max_lambda <= 1.0f)) {
    return Invalid("recall.max_lambda", absl::StrCat("must be in [0, 1], got ", *recall.max_lambda));
  }
  if (recall.min_match_bytes.has_value() &&
      (*recall.min_match_bytes < 1 || *recall.min_match_bytes > 4096)) {
    return Invalid("recall.min_match_bytes",
                   absl::StrCat("must be in [1, 4096], got ", *recall.min_match_bytes));
  }
  return absl::OkStatus();
}

absl::Status ValidateGenerate(engine::GenerateOptions& options, const RequestLimits& limits,
                              const ModelExitInfo& exit) {
  if (absl::Status s = ValidateSessionField(options.session_id); !s.ok()) return s;
  if (!tokenizer::IsValidUtf8(options.prompt)) return Invalid("prompt", "is not valid UTF-8");
  if (!options.prompt.empty() && !options.prompt_token_ids.empty()) {
    return Invalid("prompt", "and prompt_token_ids are both set: send one of them");
  }
  if (options.prompt.empty() && options.prompt_token_ids.empty() &&
      options.session_id.empty()) {
    return Invalid("prompt", "must not be empty without a session_id (or set prompt_token_ids)");
  }
  if (absl::Status s =
          ValidateTokenIds("prompt_token_ids", options.prompt_token_ids, limits.vocab_size);
      !s.ok()) {
    return s;
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
  if (!(sampling.min_p >= 0 && sampling.min_p <= 1)) {
    return Invalid("sampling.min_p", absl::StrCat("must be in [0, 1], got ", sampling.min_p));
  }
  if (!(sampling.presence_penalty >= -2 && sampling.presence_penalty <= 2)) {
    return Invalid("sampling.presence_penalty",
                   absl::StrCat("must be in [-2, 2], got ", sampling.presence_penalty));
  }
  if (!(sampling.frequency_penalty >= -2 && sampling.frequency_penalty <= 2)) {
    return Invalid("sampling.frequency_penalty",
                   absl::StrCat("must be in [-2, 2], got ", sampling.frequency_penalty));
  }
  for (const auto& [id, bias] : sampling.logit_bias) {
    if (id < 0 || id >= limits.vocab_size) {
      return Invalid(absl::StrCat("sampling.logit_bias[", id, "]"),
                     absl::StrCat("names an id outside the vocabulary [0, ", limits.vocab_size,
                                  ")"));
    }
    if (!std::isfinite(bias)) {
      return Invalid(absl::StrCat("sampling.logit_bias[", id, "]"),
                     absl::StrCat("must be finite, got ", bias));
    }
  }
  if (absl::Status s =
          ValidateTokenIds("stop_token_ids", options.stop_token_ids, limits.vocab_size);
      !s.ok()) {
    return s;
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
  if (absl::Status s = ValidateRecall(options.recall); !s.ok()) return s;
  for (size_t i = 0; i < options.stop.size(); ++i) {
    if (options.stop[i].empty()) return Invalid(absl::StrCat("stop[", i, "]"), "is empty");
    if (!tokenizer::IsValidUtf8(options.stop[i])) {
      return Invalid(absl::StrCat("stop[", i, "]"), "is not valid UTF-8");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateScore(const engine::ScoreOptions& options, const RequestLimits& limits) {
  if (absl::Status s = ValidateSessionField(options.session_id); !s.ok()) return s;
  if (absl::Status s = ValidateRecall(options.recall); !s.ok()) return s;
  if (!options.text.empty() && !options.token_ids.empty()) {
    return Invalid("text", "and token_ids are both set: send one of them");
  }
  if (options.token_ids.empty()) {
    if (options.text.empty()) return Invalid("text", "must not be empty (or set token_ids)");
    if (!tokenizer::IsValidUtf8(options.text)) return Invalid("text", "is not valid UTF-8");
    return absl::OkStatus();
  }
  if (absl::Status s = ValidateTokenIds("token_ids", options.token_ids, limits.vocab_size);
      !s.ok()) {
    return s;
  }
  if (options.session_id.empty() && options.token_ids.size() < 2) {
    return Invalid("token_ids", "needs at least 2 ids in a one-shot request: the first has "
                                "nothing before it and is context only");
  }
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
