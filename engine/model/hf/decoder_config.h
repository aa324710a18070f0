// DecoderConfig: what a Hugging Face decoder-only checkpoint's config.json says about its
// architecture, for the families in engine/model/hf/ (Llama, Mistral, Qwen2, GPT-2). The
// engine-facing sizes (layers, widths, vocabulary, the memory window) are in ModelConfig
// (model_config.h), which holds one of these; hf_config.h parses both.
#ifndef MNEMO_ENGINE_MODEL_HF_DECODER_CONFIG_H_
#define MNEMO_ENGINE_MODEL_HF_DECODER_CONFIG_H_

#include <string>

namespace mnemo::model::hf {

// How positions enter the network.
enum class PositionKind {
  kRotary,   // RoPE on queries and keys (Llama, Mistral, Qwen2)
  kLearned,  // a learned table added to the embeddings (GPT-2)
};

// RoPE frequency scaling ("rope_scaling" / "rope_parameters" "rope_type").
enum class RopeScaling { kNone, kLinear, kLlama3 };

struct DecoderConfig {
  std::string architecture;  // "LlamaForCausalLM", ...; empty for mnemo-xl
  std::string dtype = "float32";  // the checkpoint's (config.json dtype / torch_dtype)
  PositionKind positions = PositionKind::kRotary;
  int n_kv_heads = 0;        // key/value heads (grouped-query attention); n_heads when absent
  bool layer_norm = false;   // LayerNorm with bias (GPT-2) instead of RMSNorm
  bool gelu_mlp = false;     // fc -> GELU(tanh) -> proj (GPT-2) instead of SwiGLU
  bool qkv_bias = false;     // q/k/v projections have a bias
  bool out_bias = false;     // the attention output projection has a bias
  bool mlp_bias = false;     // the feed-forward projections have biases
  bool tied_head = false;    // the LM head is the embedding matrix
  float norm_eps = 1e-6f;
  int max_positions = 0;     // max_position_embeddings / n_positions

  // RoPE.
  double rope_theta = 10000.0;
  RopeScaling rope_scaling = RopeScaling::kNone;
  double rope_factor = 1.0;
  double rope_low_freq_factor = 1.0;   // llama3
  double rope_high_freq_factor = 4.0;  // llama3
  int rope_original_max_positions = 0; // llama3

  // Attention window: a query sees itself and the sliding_window - 1 positions before it
  // (Mistral); 0 = the model attends to everything before it.
  int sliding_window = 0;

  // Serving choices (LoadOptions / flags, not the checkpoint): the window and sink positions
  // a session keeps (see ModelConfig::mem_len and hf_config.h).
  int sink_tokens = 0;
};

}  // namespace mnemo::model::hf

#endif  // MNEMO_ENGINE_MODEL_HF_DECODER_CONFIG_H_
