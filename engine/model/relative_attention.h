// RelativeAttention: Transformer-XL multi-head attention with u/v biases and relative
// positions, over a layer's raw ring memory and compressed memory (DESIGN.md §2).
//
//   score(t, j) = ((q_t + u) . k_j + (q_t + v) . r_{dist(t, j)}) / sqrt(d_head)
//
// r_d = W_r R_d with R the sinusoid of distance d (clamped). The same module serves training
// (autograd) and inference (r table cached). Not thread-safe.
#ifndef MNEMO_ENGINE_MODEL_RELATIVE_ATTENTION_H_
#define MNEMO_ENGINE_MODEL_RELATIVE_ATTENTION_H_

#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include "engine/memory/layer_memory.h"
#include "engine/memory/segment_plan.h"
#include "engine/model/model_config.h"

namespace mnemo::model {

class RelativeAttentionImpl : public torch::nn::Module {
 public:
  explicit RelativeAttentionImpl(const ModelConfig& config);

  // x: [B, S, d_model], the layer-normalised input of the segment `plan` describes.
  // Appends the segment's keys/values (and any groups it completes) to `memory`, then attends.
  // sinusoid: [max_distance + 1, d_model]. Returns [B, S, d_model].
  torch::Tensor forward(const torch::Tensor& x, memory::LayerMemory& memory,
                        const memory::SegmentPlan& plan, const torch::Tensor& sinusoid);

  // Inference: computes the relative-position table once and reuses it until cleared.
  void CachePositionTable(const torch::Tensor& sinusoid);
  void ClearPositionTable() { position_table_ = torch::Tensor(); }

  // Keys or values of whole groups [B, H, n * rate, d_head] -> one slot each [B, H, n, d_head].
  torch::Tensor Compress(const torch::Tensor& grouped, bool keys);

 private:
  // [H, max_distance + 1, d_head]
  torch::Tensor PositionTable(const torch::Tensor& sinusoid);

  const int heads_;
  const int d_head_;
  const int cmem_rate_;
  const Compression compression_;
  const float scale_;

  torch::nn::Linear qkv_{nullptr};     // d_model -> 3 * H * d_head
  torch::nn::Linear out_{nullptr};     // H * d_head -> d_model
  torch::nn::Linear r_net_{nullptr};   // d_model -> H * d_head (W_r)
  torch::Tensor u_bias_;               // [H, d_head]
  torch::Tensor v_bias_;               // [H, d_head]
  torch::nn::Conv1d compress_k_{nullptr};  // conv compression only: H*d_head -> H*d_head
  torch::nn::Conv1d compress_v_{nullptr};
  torch::Tensor position_table_;       // cached [H, max_distance + 1, d_head]
};
TORCH_MODULE(RelativeAttention);

}  // namespace mnemo::model

#endif  // MNEMO_ENGINE_MODEL_RELATIVE_ATTENTION_H_
