// DecoderNetwork: the Network (family.h) of the Hugging Face decoder-only families: Llama,
// Mistral, Qwen2 (RMSNorm, SwiGLU, RoPE, grouped-query attention) and GPT-2 (LayerNorm,
// GELU(tanh), learned positions), one implementation switched by DecoderConfig.
//
// Memory: a session keeps, per layer, its keys (after RoPE, at their absolute positions) and
// values in the SessionMemory's raw ring, heads = key/value heads; query t sees positions
// [t - mem_len, t] (ModelConfig::mem_len + 1 = the window: the checkpoint's sliding_window,
// --window, or the default, hf_config.h). RoPE scores depend only on the distance between a
// query and a key, so keeping post-RoPE keys in a ring that slides gives exactly what
// transformers computes inside the window, and a session of any length costs the same per
// token: the ring never grows. A learned-position model (GPT-2) ends at its n_positions.
// Sinks (StreamingLLM, --sink_tokens K): the first K positions also live in the memory's sink
// ring; once they leave a query's window it still sees them, at the positions StreamingLLM
// assigns inside the cache (sinks first, then the window), so no distance exceeds K + window.
//
// Computation: float32 products through PackedLinear (small_matmul.h) for q/k/v (fused),
// the output projection, the feed-forward (gate and up fused) and the head; attention with
// LibTorch ops for a prompt (one masked product per layer over the ring), and for decode the
// host kernel (host_attention.h, grouped heads, over each row's visible slots in place) on the
// CPU, or the reference row by row (ReferenceAttend) elsewhere.
//
// The weights half (Load, Random, the parameter list, PrepareForServing) is decoder_weights.cc.
//
// Thread-safety: as any Network (family.h): weights read-only once prepared.
#ifndef MNEMO_ENGINE_MODEL_HF_DECODER_NETWORK_H_
#define MNEMO_ENGINE_MODEL_HF_DECODER_NETWORK_H_

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/family.h"
#include "engine/model/hf/checkpoint.h"
#include "engine/model/model_config.h"
#include "engine/model/small_matmul.h"

namespace mnemo::model::hf {

// y = x Wᵀ + b with the weight [out, in] (LibTorch's layout), packed for serving.
struct Linear {
  torch::Tensor weight;  // [out, in]
  torch::Tensor bias;    // [out] or undefined
  PackedLinear packed;   // made by Pack (PrepareForServing)

  torch::Tensor operator()(const torch::Tensor& x) const;
  void Pack(torch::ScalarType strip_type);
};

// RMSNorm (weight only) or LayerNorm (weight and bias).
struct Norm {
  torch::Tensor weight;  // [d]
  torch::Tensor bias;    // [d]; undefined for RMSNorm
  float eps = 1e-6f;

  torch::Tensor operator()(const torch::Tensor& x) const;
};

struct DecoderLayer {
  Norm attn_norm, mlp_norm;
  Linear qkv;     // [(H + 2 Hkv) dh, d]: queries, then keys, then values
  Linear out;     // [d, H dh]
  Linear gate_up; // SwiGLU: [2 ff, d] (gate then up); GELU: the first projection [ff, d]
  Linear down;    // [d, ff]
};

class DecoderNetwork : public Network {
 public:
  // Reads every tensor `config` implies from `checkpoint` (the family's names), refusing a
  // missing, misshapen or leftover one.
  static absl::StatusOr<std::unique_ptr<DecoderNetwork>> Load(const ModelConfig& config,
                                                              Checkpoint& checkpoint);
  // Random weights (tests): normal(0, 0.1) products, unit norms; deterministic in `seed`.
  static std::unique_ptr<DecoderNetwork> Random(const ModelConfig& config, uint64_t seed);

  torch::Tensor ForwardSegment(const torch::Tensor& tokens, memory::SessionMemory& memory,
                               torch::Tensor* knn_lm_keys) override;
  torch::Tensor ForwardSegmentWithExit(const torch::Tensor& tokens, memory::SessionMemory& memory,
                                       float threshold, ExitMeasure measure,
                                       const ExitClassifierImpl* classifier,
                                       torch::Tensor* exit_layers) override;
  torch::Tensor Logits(const torch::Tensor& hidden) override;
  memory::SessionMemory NewMemory(const MemoryOptions& options,
                                  const torch::Device& device) const override;
  memory::MemoryShape MemoryShapeFor(const MemoryOptions& options) const override;
  int num_layers() const override { return static_cast<int>(layers_.size()); }
  // A learned position table ends the sequence at its length, unless sinks make the session
  // streaming (LearnedPosition).
  int64_t max_sequence() const override {
    return positions_.defined() && config_.decoder.sink_tokens == 0 ? positions_.size(0) : -1;
  }
  torch::Tensor Embed(const torch::Tensor& tokens) override;
  torch::Tensor DecodeLayer(int layer, const torch::Tensor& h, DecodeStepState& rows,
                            const ActiveRows& active, torch::Tensor* ffn_input) override;
  int64_t ParameterCount() const override;
  std::string WeightsChecksum() const override;
  absl::Status PrepareForServing(const torch::Device& device,
                                 torch::ScalarType weight_dtype) override;
  absl::Status Save(const std::string& dir, const ModelConfig& config) const override;

 private:
  explicit DecoderNetwork(const ModelConfig& config);
  // Every weight tensor, for rounding, moving and counting.
  std::vector<torch::Tensor*> Parameters();
  std::vector<const torch::Tensor*> Parameters() const;

  // cos and sin of the rotary angles at `positions` ([n] int64, CPU): [n, dh / 2] each.
  void Rotary(const std::vector<int64_t>& positions, torch::Tensor& cos, torch::Tensor& sin) const;
  // Rotary(start..start + length - 1) on `device`; both left undefined without RoPE.
  void SegmentRotary(int64_t start, int64_t length, const torch::Device& device,
                     torch::Tensor& cos, torch::Tensor& sin) const;
  // x [..., n, dh] rotated by cos/sin [n, dh/2] (broadcast over the leading dimensions).
  static torch::Tensor Rotate(const torch::Tensor& x, const torch::Tensor& cos,
                              const torch::Tensor& sin);
  // One layer over a segment [1, S, d] (prefill); writes its keys/values through `write`.
  torch::Tensor LayerForward(int layer, const torch::Tensor& h, memory::LayerWrite write,
                             const torch::Tensor& cos, const torch::Tensor& sin,
                             torch::Tensor* ffn_input);
  // The learned position (row of positions_) the token at absolute position p is embedded at:
  // p itself, or with sinks its position inside the cache, min(p, sinks + mem_len), as a
  // rotary query's (PrefillSinks), and never past the table's last row. Beyond that point
  // every token shares one position: what GPT-2 never saw in training (docs/hf-models.md).
  int64_t LearnedPosition(int64_t p) const;
  torch::Tensor FeedForward(const DecoderLayer& layer, const torch::Tensor& x) const;
  // Sinks (DecoderConfig::sink_tokens) for a prompt segment at `start`: the scores of queries
  // q [1, H, S, dh] (before RoPE) against the sinks that have left their windows
  // [1, Hkv, G, S, V] (masked per query) and those sinks' values [1, Hkv, V, dh]; both left
  // undefined when no query of the segment sees a sink.
  void PrefillSinks(const torch::Tensor& q, const memory::LayerMemory& m, int64_t start,
                    torch::Tensor& scores, torch::Tensor& values) const;
  // Sinks for the decode query at position t: how many it sees (0: `keys` untouched), and in
  // `keys` [Hkv, sink_len, dh] float32 every sink key rotated to the distance the cache
  // assigns it from a query rotated at t.
  int64_t DecodeSinks(const memory::LayerMemory& m, int64_t t, torch::Tensor& keys) const;
  // Decode attention with LibTorch ops, row by row over each row's whole ring and mask (the
  // reference; other devices): q [A, H, dh] after RoPE -> [A, H dh].
  torch::Tensor ReferenceAttend(const torch::Tensor& q, int layer, DecodeStepState& rows,
                                const ActiveRows& active);
  // [1, S] token ids at positions start.. -> [1, S, d] (embeddings, plus learned positions).
  torch::Tensor EmbedSegment(const torch::Tensor& tokens, int64_t start);

  const ModelConfig config_;
  const int heads_, kv_heads_, d_head_;
  torch::Tensor embed_;      // [V, d]
  torch::Tensor positions_;  // [P, d] learned positions (GPT-2); undefined for RoPE
  std::vector<DecoderLayer> layers_;
  Norm final_norm_;
  Linear head_;              // weight is embed_ when tied
  std::vector<double> inv_freq_;  // [dh / 2] RoPE frequencies (after scaling)
};

}  // namespace mnemo::model::hf

#endif  // MNEMO_ENGINE_MODEL_HF_DECODER_NETWORK_H_
