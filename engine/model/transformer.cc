#include "engine/model/transformer.h"

#include <cmath>

#include "engine/memory/memory_shape.h"
#include "engine/model/exit_confidence.h"
#include "engine/model/exit_rule.h"
#include "engine/util/huge_pages.h"

namespace mnemo::model {
namespace {

// Transformer-XL's sinusoid of relative distance d: [sin(d * f_i), cos(d * f_i)],
// f_i = 10000^(-2i / d_model). [distances, d_model]
torch::Tensor Sinusoid(int64_t distances, int64_t d_model) {
  torch::Tensor d = torch::arange(distances, torch::kFloat32).unsqueeze(1);   // [D, 1]
  torch::Tensor inv_freq =
      torch::pow(10000.0, -torch::arange(0, d_model, 2, torch::kFloat32) / d_model);  // [d/2]
  torch::Tensor angles = d * inv_freq.unsqueeze(0);                          // [D, d/2]
  return torch::cat({torch::sin(angles), torch::cos(angles)}, 1);
}

}  // namespace

TransformerImpl::TransformerImpl(const ModelConfig& config) : config_(config) {
  embedding_ = register_module("embedding",
                               torch::nn::Embedding(config.vocab_size, config.d_model));
  block_list_ = register_module("blocks", torch::nn::ModuleList());
  for (int i = 0; i < config.n_layers; ++i) {
    blocks_.push_back(TransformerBlock(config, i));
    block_list_->push_back(blocks_.back());
  }
  final_norm_ = register_module(
      "final_norm",
      torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.d_model}).eps(config.layer_norm_eps)));
  sinusoid_ = register_buffer("sinusoid", Sinusoid(config.MaxDistance() + 1, config.d_model));
}

memory::MemoryShape TransformerImpl::MemoryShapeFor(int batch, bool compressive,
                                                    int knn_mem_len, bool knn_store,
                                                    int64_t knn_exact_threshold,
                                                    bool half_rings) const {
  memory::MemoryShape shape;
  shape.batch = batch;
  shape.layers = config_.n_layers;
  shape.heads = config_.n_heads;
  shape.d_head = config_.d_head;
  shape.seg_len = config_.seg_len;
  shape.mem_len = config_.mem_len;
  shape.cmem_len = compressive ? config_.cmem_len : 0;
  shape.knn_layer = config_.knn_layer;
  shape.knn_len = knn_mem_len < 0 ? config_.knn_mem_len : knn_mem_len;
  shape.knn_store = knn_store;
  shape.knn_exact_threshold = knn_exact_threshold;
  shape.cmem_rate = config_.cmem_rate;
  shape.max_distance = config_.MaxDistance();
  shape.half_rings = half_rings;
  return shape;
}

memory::SessionMemory TransformerImpl::NewMemory(int batch, const torch::Device& device,
                                                bool compressive, int knn_mem_len,
                                                bool knn_store,
                                                int64_t knn_exact_threshold,
                                                bool half_rings) const {
  return memory::SessionMemory::Create(
      MemoryShapeFor(batch, compressive, knn_mem_len, knn_store, knn_exact_threshold, half_rings),
      torch::TensorOptions().dtype(torch::kFloat32).device(device));
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& tokens, memory::SessionMemory& memory,
                                       std::vector<torch::Tensor>* layer_outputs,
                                       torch::Tensor* knn_lm_keys) {
  // Abandoned (the memory unchanged) if a layer throws.
  memory::SegmentWrite write = memory.BeginWrite(tokens.size(1));
  torch::Tensor h = embedding_->forward(tokens);  // [B, S, d_model]
  for (size_t i = 0; i < blocks_.size(); ++i) {
    torch::Tensor* keys = i + 1 == blocks_.size() ? knn_lm_keys : nullptr;
    h = blocks_[i]->forward(h, write.layer(static_cast<int>(i)), sinusoid_, keys);
    if (layer_outputs != nullptr) layer_outputs->push_back(h);
  }
  write.Commit();
  return h;
}

torch::Tensor TransformerImpl::ForwardWithExit(const torch::Tensor& tokens,
                                               memory::SessionMemory& memory, float threshold,
                                               ExitMeasure measure,
                                               const ExitClassifierImpl* classifier,
                                               torch::Tensor* exit_layers) {
  memory::SegmentWrite write = memory.BeginWrite(tokens.size(1));
  const int layers = static_cast<int>(blocks_.size());
  torch::Tensor h = embedding_->forward(tokens);  // [B, S, d_model]
  torch::Tensor exited = torch::zeros(tokens.sizes(), tokens.options().dtype(torch::kBool));
  torch::Tensor layer_of = torch::full(tokens.sizes(), layers, tokens.options().dtype(torch::kInt64));
  for (int i = 0; i < layers; ++i) {
    // An exited token's frozen state still flows through this layer, so the layer's memory
    // gets the key/value its exit hidden state implies (state propagation); its output is
    // discarded. A parallel equivalent of decoding token by token with CALM.
    torch::Tensor next = blocks_[i]->forward(h, write.layer(i), sinusoid_);
    torch::Tensor before = h;  // [B, S, d_model], the layer's input
    h = torch::where(exited.unsqueeze(-1), h, next);
    if (i + 1 == layers) break;
    // [B, S]; meaningless for exited tokens, which `now` leaves out.
    torch::Tensor confidence = ExitConfidence(measure, *this, classifier, i, h, before);
    torch::Tensor now = ExitsEarly(confidence, threshold) & exited.logical_not();
    layer_of.masked_fill_(now, i + 1);
    exited = exited | now;
  }
  write.Commit();
  *exit_layers = layer_of;
  return h;
}

torch::Tensor TransformerImpl::TakeReconstructionLoss() {
  torch::Tensor total;
  for (TransformerBlock& block : blocks_) {
    torch::Tensor loss = block->attention()->TakeReconstructionLoss();
    if (loss.defined()) total = total.defined() ? total + loss : loss;
  }
  return total;
}

torch::Tensor TransformerImpl::Logits(const torch::Tensor& hidden) {
  torch::Tensor normed = final_norm_->forward(hidden);
  if (packed_head_.Accepts(normed) && packed_head_.Current(embedding_->weight, torch::Tensor())) {
    return packed_head_.Apply(normed);
  }
  return torch::matmul(normed, embedding_->weight.t());
}

void TransformerImpl::CachePositionTables(torch::ScalarType strip_type) {
  for (TransformerBlock& block : blocks_) block->CacheInferenceTensors(sinusoid_, strip_type);
  packed_head_ = PackedLinear(embedding_->weight, torch::Tensor(), strip_type);
  std::vector<torch::Tensor*> buffers;
  for (TransformerBlock& block : blocks_) block->AppendInferenceBuffers(buffers);
  packed_head_.AppendBuffers(buffers);
  util::MoveToHugePages(buffers);
}

bool TransformerImpl::RoundWeights(torch::ScalarType type) {
  TORCH_CHECK(type == torch::kFloat16 || type == torch::kBFloat16,
              "RoundWeights: float16 or bfloat16, not ", type);
  torch::NoGradGuard no_grad;
  constexpr double kHalfMax = 65504.0;  // bfloat16 has float32's range
  if (type == torch::kFloat16) {
    for (const torch::Tensor& p : parameters()) {
      if (p.abs().max().item<double>() > kHalfMax) return false;
    }
  }
  for (torch::Tensor& p : parameters()) p.copy_(p.to(type));
  return true;
}

void TransformerImpl::ClearPositionTables() {
  for (TransformerBlock& block : blocks_) block->ClearInferenceTensors();
  packed_head_ = PackedLinear();
}

void TransformerImpl::InitializeWeights(uint64_t seed) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  for (auto& item : named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor& p = item.value();
    const bool is_norm = name.find("ln") != std::string::npos ||
                         name.find("final_norm") != std::string::npos;
    if (is_norm) {
      p.fill_(name.size() >= 6 && name.substr(name.size() - 6) == "weight" ? 1.0 : 0.0);
    } else if (name.find("knn_") != std::string::npos) {
      // kNN scale and gate keep the values RelativeAttention's constructor gives them; this
      // runs right after construction (trainer, Model::Random), never on trained weights.
      continue;
    } else if (p.dim() >= 2) {
      p.normal_(0.0, 0.02);
    } else {
      p.zero_();
    }
  }
  ClearPositionTables();
}

}  // namespace mnemo::model
