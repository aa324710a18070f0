#include "engine/model/hf/hf_config.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/model/json_number.h"
#include "engine/util/status_macros.h"

namespace mnemo::model::hf {
namespace {

using nlohmann::json;

absl::Status Bad(const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("config.json: ", message));
}

// Field `key` of `j` (absent or null: `fallback`); INVALID_ARGUMENT naming it on a wrong type
// or, for an integer field, a number outside its range.
template <typename T>
absl::StatusOr<T> Get(const json& j, const std::string& key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (!FitsIn<T>(*it)) {
      return Bad(absl::StrCat("field '", key, "' is out of range (", it->dump(), ")"));
    }
  }
  try {
    return it->get<T>();
  } catch (const json::exception& e) {
    return Bad(absl::StrCat("field '", key, "' has the wrong type (", it->dump(), ")"));
  }
}

// A required positive integer field.
absl::StatusOr<int> Positive(const json& j, const std::string& key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Bad(absl::StrCat("field '", key, "' is missing"));
  if (!it->is_number_integer() || it->get<int64_t>() <= 0 || it->get<int64_t>() > (1 << 30)) {
    return Bad(absl::StrCat("field '", key, "' must be a positive integer, got ", it->dump()));
  }
  return it->get<int>();
}

// RoPE: transformers 4.x (rope_theta, rope_scaling at the top level) or 5.x (rope_parameters).
absl::Status ReadRope(const json& j, DecoderConfig& d) {
  const json* params = nullptr;
  std::string where;
  if (auto it = j.find("rope_parameters"); it != j.end() && !it->is_null()) {
    params = &*it;
    where = "rope_parameters";
  } else if (auto it2 = j.find("rope_scaling"); it2 != j.end() && !it2->is_null()) {
    params = &*it2;
    where = "rope_scaling";
  }
  MNEMO_ASSIGN_OR_RETURN(d.rope_theta, Get<double>(j, "rope_theta", 10000.0));
  if (params != nullptr && !params->is_object()) {
    return Bad(absl::StrCat("field '", where, "' must be an object"));
  }
  std::string type = "default";
  if (params != nullptr) {
    MNEMO_ASSIGN_OR_RETURN(d.rope_theta, Get<double>(*params, "rope_theta", d.rope_theta));
    std::string legacy;
    MNEMO_ASSIGN_OR_RETURN(legacy, Get<std::string>(*params, "type", std::string("default")));
    MNEMO_ASSIGN_OR_RETURN(type, Get<std::string>(*params, "rope_type", legacy));
  }
  if (!(d.rope_theta > 0)) return Bad("rope_theta must be > 0");
  if (type == "default") {
    d.rope_scaling = RopeScaling::kNone;
  } else if (type == "linear" || type == "llama3") {
    d.rope_scaling = type == "linear" ? RopeScaling::kLinear : RopeScaling::kLlama3;
    MNEMO_ASSIGN_OR_RETURN(d.rope_factor, Get<double>(*params, "factor", 0.0));
    if (!(d.rope_factor > 0)) return Bad(absl::StrCat(where, ".factor must be > 0"));
    if (d.rope_scaling == RopeScaling::kLlama3) {
      MNEMO_ASSIGN_OR_RETURN(d.rope_low_freq_factor, Get<double>(*params, "low_freq_factor", 1.0));
      MNEMO_ASSIGN_OR_RETURN(d.rope_high_freq_factor, Get<double>(*params, "high_freq_factor", 4.0));
      MNEMO_ASSIGN_OR_RETURN(d.rope_original_max_positions,
                      Get<int>(*params, "original_max_position_embeddings", 0));
      if (d.rope_original_max_positions <= 0) {
        return Bad(absl::StrCat(where, ".original_max_position_embeddings must be > 0"));
      }
      if (!(d.rope_high_freq_factor > d.rope_low_freq_factor)) {
        return Bad(absl::StrCat(where, ".high_freq_factor must exceed low_freq_factor"));
      }
    }
  } else {
    return Bad(absl::StrCat(where, ".rope_type '", type,
                            "' is not supported; supported: default, linear, llama3"));
  }
  double partial = 1.0;
  MNEMO_ASSIGN_OR_RETURN(partial, Get<double>(j, "partial_rotary_factor", 1.0));
  if (params != nullptr) {
    MNEMO_ASSIGN_OR_RETURN(partial, Get<double>(*params, "partial_rotary_factor", partial));
  }
  if (partial != 1.0) return Bad("partial_rotary_factor other than 1 is not supported");
  return absl::OkStatus();
}

absl::Status ReadDtype(const json& j, DecoderConfig& d) {
  std::string legacy;
  MNEMO_ASSIGN_OR_RETURN(legacy, Get<std::string>(j, "torch_dtype", std::string("float32")));
  MNEMO_ASSIGN_OR_RETURN(d.dtype, Get<std::string>(j, "dtype", legacy));
  return absl::OkStatus();
}

// Llama, Mistral, Qwen2: RMSNorm, SwiGLU, RoPE, grouped-query attention.
absl::Status ReadLlamaLike(const json& j, std::string_view architecture, ModelConfig& c) {
  DecoderConfig& d = c.decoder;
  MNEMO_ASSIGN_OR_RETURN(c.d_model, Positive(j, "hidden_size"));
  MNEMO_ASSIGN_OR_RETURN(c.n_layers, Positive(j, "num_hidden_layers"));
  MNEMO_ASSIGN_OR_RETURN(c.n_heads, Positive(j, "num_attention_heads"));
  MNEMO_ASSIGN_OR_RETURN(c.d_ff, Positive(j, "intermediate_size"));
  MNEMO_ASSIGN_OR_RETURN(d.n_kv_heads, Get<int>(j, "num_key_value_heads", c.n_heads));
  if (d.n_kv_heads <= 0 || c.n_heads % d.n_kv_heads != 0) {
    return Bad(absl::StrCat("num_key_value_heads (", d.n_kv_heads,
                            ") must divide num_attention_heads (", c.n_heads, ")"));
  }
  if (c.d_model % c.n_heads != 0 && j.find("head_dim") == j.end()) {
    return Bad("hidden_size must be a multiple of num_attention_heads when head_dim is absent");
  }
  MNEMO_ASSIGN_OR_RETURN(c.d_head, Get<int>(j, "head_dim", c.d_model / c.n_heads));
  if (c.d_head <= 0 || c.d_head % 2 != 0) return Bad("head_dim must be a positive even number");
  double eps = 1e-6;
  MNEMO_ASSIGN_OR_RETURN(eps, Get<double>(j, "rms_norm_eps", 1e-6));
  d.norm_eps = static_cast<float>(eps);
  std::string act;
  MNEMO_ASSIGN_OR_RETURN(act, Get<std::string>(j, "hidden_act", std::string("silu")));
  if (act != "silu") {
    return Bad(absl::StrCat("hidden_act '", act, "' is not supported for ", std::string(architecture),
                            "; supported: silu"));
  }
  MNEMO_ASSIGN_OR_RETURN(d.max_positions, Positive(j, "max_position_embeddings"));
  MNEMO_ASSIGN_OR_RETURN(d.tied_head, Get<bool>(j, "tie_word_embeddings", false));
  if (architecture == "LlamaForCausalLM") {
    bool attention_bias = false;
    MNEMO_ASSIGN_OR_RETURN(attention_bias, Get<bool>(j, "attention_bias", false));
    d.qkv_bias = d.out_bias = attention_bias;
    MNEMO_ASSIGN_OR_RETURN(d.mlp_bias, Get<bool>(j, "mlp_bias", false));
  } else if (architecture == "Qwen2ForCausalLM") {
    d.qkv_bias = true;
    bool sliding = false;
    MNEMO_ASSIGN_OR_RETURN(sliding, Get<bool>(j, "use_sliding_window", false));
    if (sliding) {
      return Bad("use_sliding_window true (sliding attention on some layers) is not supported "
                 "for Qwen2ForCausalLM");
    }
  } else if (architecture == "MistralForCausalLM") {
    MNEMO_ASSIGN_OR_RETURN(d.sliding_window, Get<int>(j, "sliding_window", 0));
    if (d.sliding_window < 0) return Bad("sliding_window must be >= 0 or null");
  }
  return ReadRope(j, d);
}

absl::Status ReadGpt2(const json& j, ModelConfig& c) {
  DecoderConfig& d = c.decoder;
  d.positions = PositionKind::kLearned;
  d.layer_norm = d.gelu_mlp = true;
  d.qkv_bias = d.out_bias = d.mlp_bias = true;
  d.tied_head = true;
  MNEMO_ASSIGN_OR_RETURN(c.d_model, Positive(j, "n_embd"));
  MNEMO_ASSIGN_OR_RETURN(c.n_layers, Positive(j, "n_layer"));
  MNEMO_ASSIGN_OR_RETURN(c.n_heads, Positive(j, "n_head"));
  if (c.d_model % c.n_heads != 0) return Bad("n_embd must be a multiple of n_head");
  c.d_head = c.d_model / c.n_heads;
  d.n_kv_heads = c.n_heads;
  // n_embd is at most 2^30 (Positive), so the default 4 * n_embd needs 64 bits.
  int64_t inner = 0;
  MNEMO_ASSIGN_OR_RETURN(inner, Get<int64_t>(j, "n_inner", int64_t{4} * c.d_model));
  if (inner <= 0 || inner > (1 << 30)) return Bad("n_inner must be in [1, 2^30]");
  c.d_ff = static_cast<int>(inner);
  MNEMO_ASSIGN_OR_RETURN(d.max_positions, Positive(j, "n_positions"));
  double eps = 1e-5;
  MNEMO_ASSIGN_OR_RETURN(eps, Get<double>(j, "layer_norm_epsilon", 1e-5));
  d.norm_eps = static_cast<float>(eps);
  std::string act;
  MNEMO_ASSIGN_OR_RETURN(act, Get<std::string>(j, "activation_function", std::string("gelu_new")));
  if (act != "gelu_new" && act != "gelu_pytorch_tanh") {
    return Bad(absl::StrCat("activation_function '", act,
                            "' is not supported for GPT2LMHeadModel; supported: gelu_new, "
                            "gelu_pytorch_tanh"));
  }
  bool flag = true;
  MNEMO_ASSIGN_OR_RETURN(flag, Get<bool>(j, "scale_attn_weights", true));
  if (!flag) return Bad("scale_attn_weights false is not supported");
  MNEMO_ASSIGN_OR_RETURN(flag, Get<bool>(j, "scale_attn_by_inverse_layer_idx", false));
  if (flag) return Bad("scale_attn_by_inverse_layer_idx true is not supported");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ParseHfConfig(const std::string& json_text,
                                          std::string_view architecture) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    return Bad(absl::StrCat("not valid JSON: ", e.what()));
  }
  if (!j.is_object()) return Bad("must hold a JSON object");
  ModelConfig c;
  c.decoder.architecture = std::string(architecture);
  MNEMO_ASSIGN_OR_RETURN(c.name, Get<std::string>(j, "model_type", std::string(architecture)));
  MNEMO_ASSIGN_OR_RETURN(c.vocab_size, Positive(j, "vocab_size"));
  if (absl::Status s = ReadDtype(j, c.decoder); !s.ok()) return s;
  if (architecture == "GPT2LMHeadModel") {
    if (absl::Status s = ReadGpt2(j, c); !s.ok()) return s;
  } else {
    if (absl::Status s = ReadLlamaLike(j, architecture, c); !s.ok()) return s;
  }
  // The memory: only the raw ring (no compressive or kNN layers); the window as the model
  // defines it (Mistral) or the default.
  c.seg_len = kSegmentLength;
  c.cmem_len = 0;
  c.knn_layer = -1;
  c.exit_heads = true;  // the final norm and head apply to any layer's state (CALM)
  int window = c.decoder.sliding_window > 0 ? c.decoder.sliding_window
                                            : std::min(c.decoder.max_positions, kDefaultWindow);
  window = std::min(window, c.decoder.max_positions);
  c.mem_len = std::max(1, window - 1);
  c.clamp_len = c.mem_len;
  // mnemo-calibrate's thresholds, when it has certified some for this folder.
  if (absl::Status s = ParseExitSettings(json_text, c); !s.ok()) return s;
  return c;
}

absl::Status SetWindow(ModelConfig& config, int window, int sink_tokens) {
  DecoderConfig& d = config.decoder;
  if (window < 0) return absl::InvalidArgumentError("window must be >= 0");
  if (window > 0) {
    if (window < 2) return absl::InvalidArgumentError("window must be >= 2 positions");
    if (window > d.max_positions) {
      return absl::InvalidArgumentError(absl::StrCat(
          "window ", window, " exceeds the ", d.max_positions, " positions ", d.architecture,
          " was trained on (max_position_embeddings)"));
    }
    if (d.sliding_window > 0 && window > d.sliding_window) {
      return absl::InvalidArgumentError(absl::StrCat(
          "window ", window, " exceeds the model's own sliding_window ", d.sliding_window));
    }
    config.mem_len = window - 1;
    config.clamp_len = config.mem_len;
  }
  if (sink_tokens >= 0) {
    if (sink_tokens >= config.mem_len + 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sink_tokens ", sink_tokens, " must be smaller than the window ", config.mem_len + 1));
    }
    d.sink_tokens = sink_tokens;
  }
  return absl::OkStatus();
}

}  // namespace mnemo::model::hf
