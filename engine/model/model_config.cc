#include "engine/model/model_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/model/json_number.h"

namespace mnemo::model {
namespace {

using nlohmann::json;

// Reads `key` into `out` if present; INVALID_ARGUMENT naming the key on a type mismatch or, for
// an integer field, a number outside its range.
template <typename T>
absl::Status Read(const json& j, const char* key, T& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (!FitsIn<T>(*it)) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: field '", key, "' is out of range: ", it->dump()));
    }
  }
  try {
    out = it->get<T>();
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: field '", key, "' has the wrong type: ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status Check(bool ok, const std::string& message) {
  return ok ? absl::OkStatus() : absl::InvalidArgumentError("config.json: " + message);
}

// The shortest decimal that reads back as the same float, as a double (0.9f is written 0.9,
// not 0.89999997615814209).
double ShortestDecimal(float value) {
  char text[32];
  for (int digits = 6; digits <= 9; ++digits) {
    std::snprintf(text, sizeof(text), "%.*g", digits, static_cast<double>(value));
    if (std::strtof(text, nullptr) == value) break;
  }
  return std::strtod(text, nullptr);
}

// "exit_thresholds" (the measures other than softmax response) and "exit_measure".
absl::Status ReadExitFields(const json& j, ModelConfig& c) {
  auto thresholds = j.find("exit_thresholds");
  if (thresholds != j.end() && !thresholds->is_null()) {
    if (!thresholds->is_object()) {
      return absl::InvalidArgumentError(
          "config.json: field 'exit_thresholds' must be an object {measure: threshold}");
    }
    for (const auto& [name, value] : thresholds->items()) {
      absl::StatusOr<ExitMeasure> measure = ParseExitMeasure(name);
      if (!measure.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("config.json: exit_thresholds: ", measure.status().message()));
      }
      if (*measure == ExitMeasure::kSoftmaxResponse) {
        return absl::InvalidArgumentError(
            "config.json: exit_thresholds: softmax response's threshold is 'exit_threshold'");
      }
      if (!value.is_number()) {
        return absl::InvalidArgumentError(
            absl::StrCat("config.json: exit_thresholds.", name, " must be a number"));
      }
      c.SetExitThreshold(*measure, value.get<float>());
    }
  }
  std::string measure_name = ExitMeasureName(c.exit_measure);
  if (absl::Status s = Read(j, "exit_measure", measure_name); !s.ok()) return s;
  absl::StatusOr<ExitMeasure> measure = ParseExitMeasure(measure_name);
  if (!measure.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: exit_measure: ", measure.status().message()));
  }
  c.exit_measure = *measure;
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateModelConfig(const ModelConfig& c) {
  if (auto s = Check(c.vocab_size >= kByteVocabSize,
                     absl::StrCat("vocab_size must be >= ", kByteVocabSize));
      !s.ok())
    return s;
  for (const auto& [name, value] :
       {std::pair<const char*, int>{"n_layers", c.n_layers}, {"d_model", c.d_model},
        {"n_heads", c.n_heads}, {"d_head", c.d_head}, {"d_ff", c.d_ff},
        {"seg_len", c.seg_len}, {"mem_len", c.mem_len}, {"cmem_rate", c.cmem_rate},
        {"clamp_len", c.clamp_len}}) {
    if (auto s = Check(value > 0, absl::StrCat(name, " must be > 0, got ", value)); !s.ok())
      return s;
  }
  if (auto s = Check(c.cmem_len >= 0, "cmem_len must be >= 0"); !s.ok()) return s;
  if (auto s = Check(c.cmem_len == 0 || c.mem_len >= c.cmem_rate,
                     "mem_len must be >= cmem_rate when compressive memory is on");
      !s.ok())
    return s;
  if (auto s = Check(c.knn_layer < c.n_layers, "knn_layer must be < n_layers"); !s.ok())
    return s;
  if (auto s = Check(c.knn_topk > 0, "knn_topk must be > 0"); !s.ok()) return s;
  if (auto s = Check(c.knn_mem_len >= 0, "knn_mem_len must be >= 0"); !s.ok()) return s;
  // (A value beyond float's range reads as infinity, which ModelConfigToJson would write as
  // null.)
  if (auto s = Check(c.layer_norm_eps >= 0.0f && std::isfinite(c.layer_norm_eps),
                     "layer_norm_eps must be finite and >= 0");
      !s.ok())
    return s;
  if (auto s = Check(c.exit_threshold >= 0.0f && std::isfinite(c.exit_threshold),
                     "exit_threshold must be finite and >= 0 (1.0 = never exit)");
      !s.ok())
    return s;
  for (ExitMeasure measure : {ExitMeasure::kHiddenSaturation, ExitMeasure::kClassifier}) {
    const float t = c.ExitThreshold(measure);
    if (auto s = Check(t >= 0.0f && std::isfinite(t),
                       absl::StrCat("exit_thresholds.", ExitMeasureName(measure),
                                    " must be finite and >= 0 (1.0 = never exit)"));
        !s.ok())
      return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<Compression> ParseCompression(const std::string& name) {
  if (name == "mean") return Compression::kMean;
  if (name == "max") return Compression::kMax;
  if (name == "conv") return Compression::kConv;
  return absl::InvalidArgumentError(
      absl::StrCat("compression must be mean, max or conv, got '", name, "'"));
}

const char* CompressionName(Compression compression) {
  switch (compression) {
    case Compression::kMean: return "mean";
    case Compression::kMax: return "max";
    case Compression::kConv: return "conv";
  }
  return "mean";
}

int64_t ModelConfig::ParameterCount() const {
  const int64_t d = d_model, inner = int64_t{n_heads} * d_head;
  int64_t per_layer = 2 * 2 * d                // two LayerNorms
                      + 3 * d * inner           // qkv
                      + inner * d               // output projection
                      + d * inner               // r_net (relative positions)
                      + 2 * inner               // u, v biases
                      + d * d_ff + d_ff         // ff1
                      + d_ff * d + d;           // ff2
  if (cmem_len > 0 && compression == Compression::kConv) {
    per_layer += 2 * (inner * inner * cmem_rate + inner);  // key and value Conv1d
  }
  return int64_t{vocab_size} * d + n_layers * per_layer + 2 * d;
}

float ModelConfig::ExitThreshold(ExitMeasure measure) const {
  switch (measure) {
    case ExitMeasure::kSoftmaxResponse: return exit_threshold;
    case ExitMeasure::kHiddenSaturation: return saturation_exit_threshold;
    case ExitMeasure::kClassifier: return classifier_exit_threshold;
  }
  return exit_threshold;
}

void ModelConfig::SetExitThreshold(ExitMeasure measure, float threshold) {
  switch (measure) {
    case ExitMeasure::kSoftmaxResponse: exit_threshold = threshold; return;
    case ExitMeasure::kHiddenSaturation: saturation_exit_threshold = threshold; return;
    case ExitMeasure::kClassifier: classifier_exit_threshold = threshold; return;
  }
}

int ModelConfig::MaxDistance() const {
  // Raw keys: up to mem_len back. Compressed slots: the oldest visible slot's last position
  // is at most mem_len + cmem_rate * (cmem_len + 1) back.
  // In 64 bits: a validated config bounds none of these from above.
  const int64_t raw = mem_len;
  const int64_t compressed =
      cmem_len > 0 ? mem_len + int64_t{cmem_rate} * (int64_t{cmem_len} + 1) : 0;
  return static_cast<int>(std::min<int64_t>(clamp_len, std::max(raw, compressed)));
}

absl::Status ParseExitSettings(const std::string& json_text, ModelConfig& config) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("config.json is not valid JSON: ", e.what()));
  }
  if (!j.is_object()) return absl::InvalidArgumentError("config.json must hold a JSON object");
  if (absl::Status s = Read(j, "exit_threshold", config.exit_threshold); !s.ok()) return s;
  if (absl::Status s = ReadExitFields(j, config); !s.ok()) return s;
  if (auto s = Check(config.exit_threshold >= 0.0f && std::isfinite(config.exit_threshold),
                     "exit_threshold must be finite and >= 0 (1.0 = never exit)");
      !s.ok())
    return s;
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("config.json is not valid JSON: ", e.what()));
  }
  if (!j.is_object()) return absl::InvalidArgumentError("config.json must hold a JSON object");
  ModelConfig c;
  c.d_head = 0;
  c.d_ff = 0;
  std::string compression = "mean";
  for (absl::Status s :
       {Read(j, "name", c.name), Read(j, "vocab_size", c.vocab_size),
        Read(j, "n_layers", c.n_layers), Read(j, "d_model", c.d_model),
        Read(j, "n_heads", c.n_heads), Read(j, "d_head", c.d_head), Read(j, "d_ff", c.d_ff),
        Read(j, "layer_norm_eps", c.layer_norm_eps), Read(j, "seg_len", c.seg_len),
        Read(j, "mem_len", c.mem_len), Read(j, "cmem_len", c.cmem_len),
        Read(j, "cmem_rate", c.cmem_rate), Read(j, "compression", compression),
        Read(j, "clamp_len", c.clamp_len), Read(j, "knn_layer", c.knn_layer),
        Read(j, "knn_topk", c.knn_topk), Read(j, "knn_mem_len", c.knn_mem_len),
        Read(j, "exit_heads", c.exit_heads), Read(j, "exit_threshold", c.exit_threshold)}) {
    if (!s.ok()) return s;
  }
  if (absl::Status s = ReadExitFields(j, c); !s.ok()) return s;
  if (c.n_heads > 0 && c.d_head == 0) c.d_head = c.d_model / c.n_heads;
  // (Left 0, for ValidateModelConfig to refuse, when 4 * d_model does not fit.)
  if (c.d_ff == 0 && c.d_model > 0 && c.d_model <= std::numeric_limits<int>::max() / 4) {
    c.d_ff = 4 * c.d_model;
  }
  absl::StatusOr<Compression> parsed = ParseCompression(compression);
  if (!parsed.ok()) return absl::InvalidArgumentError(absl::StrCat("config.json: ", parsed.status().message()));
  c.compression = *parsed;
  if (absl::Status s = ValidateModelConfig(c); !s.ok()) return s;
  return c;
}

std::string ModelConfigToJson(const ModelConfig& c) {
  json j = {{"name", c.name},
            {"architecture", "mnemo-xl"},
            {"tokenizer", "bytes"},
            {"vocab_size", c.vocab_size},
            {"n_layers", c.n_layers},
            {"d_model", c.d_model},
            {"n_heads", c.n_heads},
            {"d_head", c.d_head},
            {"d_ff", c.d_ff},
            {"layer_norm_eps", c.layer_norm_eps},
            {"seg_len", c.seg_len},
            {"mem_len", c.mem_len},
            {"cmem_len", c.cmem_len},
            {"cmem_rate", c.cmem_rate},
            {"compression", CompressionName(c.compression)},
            {"clamp_len", c.clamp_len},
            {"knn_layer", c.knn_layer},
            {"knn_topk", c.knn_topk},
            {"knn_mem_len", c.knn_mem_len},
            {"exit_heads", c.exit_heads},
            {"exit_threshold", ShortestDecimal(c.exit_threshold)}};
  // Written only when set, so configs that predate them keep their exact text.
  json thresholds = json::object();
  for (ExitMeasure measure : {ExitMeasure::kHiddenSaturation, ExitMeasure::kClassifier}) {
    if (c.ExitThreshold(measure) != 1.0f) {
      thresholds[ExitMeasureName(measure)] = ShortestDecimal(c.ExitThreshold(measure));
    }
  }
  if (!thresholds.empty()) j["exit_thresholds"] = thresholds;
  if (c.exit_measure != ExitMeasure::kSoftmaxResponse) {
    j["exit_measure"] = ExitMeasureName(c.exit_measure);
  }
  return j.dump(2) + "\n";
}

}  // namespace mnemo::model
