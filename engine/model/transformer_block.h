// TransformerBlock: one pre-LayerNorm decoder layer: relative attention over memory, then a
// GELU feed-forward, each on a residual. One definition for training and serving.
#ifndef MNEMO_ENGINE_MODEL_TRANSFORMER_BLOCK_H_
#define MNEMO_ENGINE_MODEL_TRANSFORMER_BLOCK_H_

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/types.h>

#include "engine/memory/segment_write.h"
#include "engine/model/decode_step_state.h"
#include "engine/model/model_config.h"
#include "engine/model/relative_attention.h"
#include "engine/model/small_matmul.h"

namespace mnemo::model {

class TransformerBlockImpl : public torch::nn::Module {
 public:
  TransformerBlockImpl(const ModelConfig& config, int layer);

  // h: [B, S, d_model] -> [B, S, d_model], appending the segment to this layer's memory
  // through `write`. If `ffn_input` is set it receives the feed-forward input after its
  // LayerNorm, [B, S, d_model] (the kNN-LM key, docs/design.md §4).
  torch::Tensor forward(const torch::Tensor& h, memory::LayerWrite write,
                        const torch::Tensor& sinusoid, torch::Tensor* ffn_input = nullptr);

  // Batched decode (BatchDecoder): h [B, d_model], every row's input to this layer (exited
  // rows' frozen states included, so their keys/values still reach `layer`'s memory). Returns
  // the layer's output for the active rows only, [A, d_model]; `ffn_input` (if set) gets
  // theirs, [A, d_model].
  torch::Tensor Decode(const torch::Tensor& h, int layer, DecodeStepState& rows,
                       const ActiveRows& active, const torch::Tensor& sinusoid,
                       torch::Tensor* ffn_input = nullptr);

  RelativeAttention& attention() { return attn_; }

  // Inference: caches what serving derives from the weights (the attention's position table,
  // the decode path's packed weights, strips of strip_type); training must clear them before
  // changing the weights.
  void CacheInferenceTensors(const torch::Tensor& sinusoid, torch::ScalarType strip_type);
  void ClearInferenceTensors();
  // Appends the cached tensors, for Transformer to relocate.
  void AppendInferenceBuffers(std::vector<torch::Tensor*>& buffers);

 private:
  // ff2(gelu(ff1(x))), through the packed weights when cached (inference).
  torch::Tensor FeedForward(const torch::Tensor& normed);

  torch::nn::LayerNorm ln1_{nullptr};
  RelativeAttention attn_{nullptr};
  torch::nn::LayerNorm ln2_{nullptr};
  torch::nn::Linear ff1_{nullptr};  // d_model -> d_ff
  torch::nn::Linear ff2_{nullptr};  // d_ff -> d_model
  PackedLinear packed_ff1_, packed_ff2_;  // decode's copies (small_matmul.h), when cached
};
TORCH_MODULE(TransformerBlock);

}  // namespace mnemo::model

#endif  // MNEMO_ENGINE_MODEL_TRANSFORMER_BLOCK_H_
