// Transformer: the whole native network: byte embedding, the decoder blocks and the shared
// final LayerNorm + (embedding-tied) LM head that any layer's output can be read through.
#ifndef MNEMO_ENGINE_MODEL_TRANSFORMER_H_
#define MNEMO_ENGINE_MODEL_TRANSFORMER_H_

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/normalization.h>
#include <torch/types.h>

#include <vector>

#include "engine/memory/session_memory.h"
#include "engine/model/exit_classifier.h"
#include "engine/model/exit_measure.h"
#include "engine/model/model_config.h"
#include "engine/model/small_matmul.h"
#include "engine/model/transformer_block.h"

namespace mnemo::model {

class TransformerImpl : public torch::nn::Module {
 public:
  explicit TransformerImpl(const ModelConfig& config);

  const ModelConfig& config() const { return config_; }

  // Runs one segment: tokens [B, S] (S <= seg_len) at positions memory.next_position()...
  // Appends it to `memory` (and commits). Returns the final hidden states [B, S, d_model]
  // before the final LayerNorm. If `layer_outputs` is set it receives every layer's output
  // (n_layers tensors [B, S, d_model], the last equal to the return value) for CALM losses.
  // If `knn_lm_keys` is set it receives the last layer's post-LayerNorm feed-forward input
  // [B, S, d_model]: the kNN-LM datastore key of each position (docs/design.md §4).
  torch::Tensor forward(const torch::Tensor& tokens, memory::SessionMemory& memory,
                        std::vector<torch::Tensor>* layer_outputs = nullptr,
                        torch::Tensor* knn_lm_keys = nullptr);

  // Early exit with state propagation (see Model::ForwardWithExit): a token leaves after the
  // first layer whose `measure` confidence (exit_confidence.h) reaches `threshold`.
  // `classifier` is needed for ExitMeasure::kClassifier only. Returns the hidden state each
  // token left with [B, S, d_model]; exit_layers receives [B, S] int64, 1-based.
  torch::Tensor ForwardWithExit(const torch::Tensor& tokens, memory::SessionMemory& memory,
                                float threshold, ExitMeasure measure,
                                const ExitClassifierImpl* classifier, torch::Tensor* exit_layers);

  // Training: the compression nets' attention-reconstruction loss summed over the segments
  // run since the last call (undefined tensor if none). Only conv compression has one.
  torch::Tensor TakeReconstructionLoss();

  // Shared exit head: final LayerNorm + tied LM head. [..., d_model] -> [..., vocab] logits.
  torch::Tensor Logits(const torch::Tensor& hidden);

  // knn_mem_len < 0 = the config's; 0 = no kNN memory. compressive=false drops the
  // compressed memory. knn_store: the kNN entries go to a knn::KnnMemory (batch 1, exact up to
  // knn_exact_threshold entries (0 = its default), then FAISS IVF) instead of the dense ring
  // training uses (see MemoryShape). half_rings: MemoryShape::half_rings.
  memory::SessionMemory NewMemory(int batch, const torch::Device& device, bool compressive = true,
                                  int knn_mem_len = -1, bool knn_store = false,
                                  int64_t knn_exact_threshold = 0, bool half_rings = false) const;
  // The shape NewMemory makes with the same arguments.
  memory::MemoryShape MemoryShapeFor(int batch, bool compressive = true, int knn_mem_len = -1,
                                     bool knn_store = false, int64_t knn_exact_threshold = 0,
                                     bool half_rings = false) const;

  // Pieces for callers that run the layers themselves (BatchDecoder's batched decode step).
  int num_layers() const { return static_cast<int>(blocks_.size()); }
  TransformerBlock& block(int i) { return blocks_[i]; }
  // tokens [...] int64 -> [..., d_model]
  torch::Tensor Embed(const torch::Tensor& tokens) { return embedding_->forward(tokens); }
  const torch::Tensor& sinusoid() const { return sinusoid_; }  // [max_distance + 1, d_model]

  // Inference: precompute the per-layer relative-position tables and pack the weights the
  // serving paths multiply (small_matmul.h), all in one huge-page region (util/huge_pages.h:
  // a decode step of many rows streams them from memory); the weights must not change until
  // cleared. strip_type kFloat16 or kBFloat16 packs them in that type (PackedLinear), for
  // weights it holds exactly (RoundWeights).
  void CachePositionTables(torch::ScalarType strip_type = torch::kFloat32);
  // Rounds every parameter to the nearest value of `type` (kFloat16 or kBFloat16), in place
  // (still float32 tensors), so that the packed products and LibTorch's use the same weights.
  // False, changing nothing, when a value is beyond float16's range (|x| > 65504). Clear the
  // cached tables first if they are set.
  bool RoundWeights(torch::ScalarType type);
  void ClearPositionTables();

  // Normal(0, 0.02) weights, unit LayerNorms, zero biases; deterministic in `seed`.
  void InitializeWeights(uint64_t seed);

 private:
  const ModelConfig config_;
  torch::nn::Embedding embedding_{nullptr};  // [vocab, d_model], also the LM head
  std::vector<TransformerBlock> blocks_;
  torch::nn::ModuleList block_list_{nullptr};
  torch::nn::LayerNorm final_norm_{nullptr};
  torch::Tensor sinusoid_;  // buffer [max_distance + 1, d_model]; not saved
  PackedLinear packed_head_;  // the tied head, packed (inference)
};
TORCH_MODULE(Transformer);

}  // namespace mnemo::model

#endif  // MNEMO_ENGINE_MODEL_TRANSFORMER_H_
