#include "engine/model/transformer_block.h"

#include "engine/model/host_gelu.h"

namespace mnemo::model {

TransformerBlockImpl::TransformerBlockImpl(const ModelConfig& config, int layer) {
  auto norm = torch::nn::LayerNormOptions({config.d_model}).eps(config.layer_norm_eps);
  ln1_ = register_module("ln1", torch::nn::LayerNorm(norm));
  attn_ = register_module("attn", RelativeAttention(config, layer));
  ln2_ = register_module("ln2", torch::nn::LayerNorm(norm));
  ff1_ = register_module("ff1", torch::nn::Linear(config.d_model, config.d_ff));
  ff2_ = register_module("ff2", torch::nn::Linear(config.d_ff, config.d_model));
}

torch::Tensor TransformerBlockImpl::forward(const torch::Tensor& h, memory::LayerWrite write,
                                            const torch::Tensor& sinusoid,
                                            torch::Tensor* ffn_input) {
  torch::Tensor x = h + attn_->forward(ln1_->forward(h), write, sinusoid);
  torch::Tensor normed = ln2_->forward(x);
  if (ffn_input != nullptr) *ffn_input = normed;
  return x + FeedForward(normed);
}

torch::Tensor TransformerBlockImpl::FeedForward(const torch::Tensor& normed) {
  // Gelu: in place on the host for decode rows (host_gelu.h), else torch::gelu.
  return LinearForward(ff2_, packed_ff2_, Gelu(LinearForward(ff1_, packed_ff1_, normed)));
}

void TransformerBlockImpl::CacheInferenceTensors(const torch::Tensor& sinusoid,
                                                 torch::ScalarType strip_type) {
  attn_->CachePositionTable(sinusoid, strip_type);
  packed_ff1_ = PackedLinear(ff1_->weight, ff1_->bias, strip_type);
  packed_ff2_ = PackedLinear(ff2_->weight, ff2_->bias, strip_type);
}

void TransformerBlockImpl::ClearInferenceTensors() {
  attn_->ClearPositionTable();
  packed_ff1_ = PackedLinear();
  packed_ff2_ = PackedLinear();
}

void TransformerBlockImpl::AppendInferenceBuffers(std::vector<torch::Tensor*>& buffers) {
  attn_->AppendInferenceBuffers(buffers);
  packed_ff1_.AppendBuffers(buffers);
  packed_ff2_.AppendBuffers(buffers);
}

torch::Tensor TransformerBlockImpl::Decode(const torch::Tensor& h, int layer,
                                           DecodeStepState& rows, const ActiveRows& active,
                                           const torch::Tensor& sinusoid,
                                           torch::Tensor* ffn_input) {
  // LayerNorm + qkv for every row (keys/values), attention and FFN for the active ones.
  torch::Tensor attended = attn_->Decode(ln1_->forward(h), layer, rows, active, sinusoid);
  if (active.rows.empty()) return attended;  // [0, d]: every row has exited
  torch::Tensor x = (active.all ? h : h.index_select(0, active.index)) + attended;  // [A, d]
  torch::Tensor normed = ln2_->forward(x);
  if (ffn_input != nullptr) *ffn_input = normed;
  return x + FeedForward(normed);
}

}  // namespace mnemo::model
