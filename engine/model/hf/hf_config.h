// Reading a Hugging Face checkpoint's config.json (transformers 4.x and 5.x layouts) into the
// ModelConfig the engine serves it with (model_config.h; its `decoder` holds the architecture's
// own settings, decoder_config.h).
//
// Both layouts transformers writes are read: 4.x puts rope_theta, rope_scaling and torch_dtype
// at the top level; 5.x nests RoPE under rope_parameters and says dtype. Anything the engine
// cannot serve exactly (an unknown rope type, a GPT-2 with scaled attention, a partial rotary
// factor) is refused naming the field and what is supported: nothing is guessed.
#ifndef MNEMO_ENGINE_MODEL_HF_HF_CONFIG_H_
#define MNEMO_ENGINE_MODEL_HF_HF_CONFIG_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/model/model_config.h"

namespace mnemo::model::hf {

// A session's attention window when neither the checkpoint (sliding_window) nor the server
// (--window) sets one: min(max_position_embeddings, this) positions.
inline constexpr int kDefaultWindow = 4096;
// Positions per prefill segment.
inline constexpr int kSegmentLength = 128;

// config.json's text for `architecture` (one of the hf families') -> ModelConfig.
// INVALID_ARGUMENT naming the field at fault (the caller prefixes the path).
absl::StatusOr<ModelConfig> ParseHfConfig(const std::string& json_text,
                                          std::string_view architecture);

// Sets the positions a session keeps (docs/user-guide.md "Bounded sessions"): a query sees
// itself and the `window` - 1 positions before it (0 = keep the config's) plus the first
// `sink_tokens` positions of the sequence (-1 = keep the config's). INVALID_ARGUMENT when
// the window exceeds what the model was trained on, or for a learned-position model (GPT-2),
// whose positions cannot be reassigned.
absl::Status SetWindow(ModelConfig& config, int window, int sink_tokens);

}  // namespace mnemo::model::hf

#endif  // MNEMO_ENGINE_MODEL_HF_HF_CONFIG_H_
