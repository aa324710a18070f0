// DecoderNetwork's weights (decoder_network.h): reading them from a checkpoint by each
// family's tensor names, random initialisation, the parameter list every whole-weights
// operation walks (counting, checksums, rounding, moving), and readying them for serving.
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/model/exit_classifier.h"
#include "engine/model/hf/decoder_network.h"

namespace mnemo::model::hf {

absl::StatusOr<std::unique_ptr<DecoderNetwork>> DecoderNetwork::Load(const ModelConfig& config,
                                                                     Checkpoint& ckpt) {
  std::unique_ptr<DecoderNetwork> net(new DecoderNetwork(config));
  const DecoderConfig& dc = config.decoder;
  const int64_t d = config.d_model, V = config.vocab_size, ff = config.d_ff;
  const int64_t q_width = int64_t{config.n_heads} * config.d_head;
  const int64_t kv_width = int64_t{dc.n_kv_heads} * config.d_head;
  auto take = [&ckpt](torch::Tensor& out, const std::string& name,
                      std::vector<int64_t> shape) -> absl::Status {
    absl::StatusOr<torch::Tensor> t = ckpt.Take(name, std::move(shape));
    if (!t.ok()) return t.status();
    out = *std::move(t);
    return absl::OkStatus();
  };
#define MNEMO_TAKE(out, name, ...)                                               \
  if (absl::Status s = take(out, name, __VA_ARGS__); !s.ok()) return s

  if (dc.positions == PositionKind::kLearned) {
    // GPT-2: Conv1D weights stored [in, out]; names with or without "transformer.".
    const std::string p = ckpt.Has("transformer.wte.weight") ? "transformer." : "";
    MNEMO_TAKE(net->embed_, p + "wte.weight", {V, d});
    MNEMO_TAKE(net->positions_, p + "wpe.weight", {dc.max_positions, d});
    for (int i = 0; i < config.n_layers; ++i) {
      DecoderLayer& l = net->layers_[i];
      const std::string h = absl::StrCat(p, "h.", i, ".");
      MNEMO_TAKE(l.attn_norm.weight, h + "ln_1.weight", {d});
      MNEMO_TAKE(l.attn_norm.bias, h + "ln_1.bias", {d});
      MNEMO_TAKE(l.mlp_norm.weight, h + "ln_2.weight", {d});
      MNEMO_TAKE(l.mlp_norm.bias, h + "ln_2.bias", {d});
      torch::Tensor w;
      MNEMO_TAKE(w, h + "attn.c_attn.weight", {d, 3 * d});
      l.qkv.weight = w.t().contiguous();
      MNEMO_TAKE(l.qkv.bias, h + "attn.c_attn.bias", {3 * d});
      MNEMO_TAKE(w, h + "attn.c_proj.weight", {d, d});
      l.out.weight = w.t().contiguous();
      MNEMO_TAKE(l.out.bias, h + "attn.c_proj.bias", {d});
      MNEMO_TAKE(w, h + "mlp.c_fc.weight", {d, ff});
      l.gate_up.weight = w.t().contiguous();
      MNEMO_TAKE(l.gate_up.bias, h + "mlp.c_fc.bias", {ff});
      MNEMO_TAKE(w, h + "mlp.c_proj.weight", {ff, d});
      l.down.weight = w.t().contiguous();
      MNEMO_TAKE(l.down.bias, h + "mlp.c_proj.bias", {d});
    }
    MNEMO_TAKE(net->final_norm_.weight, p + "ln_f.weight", {d});
    MNEMO_TAKE(net->final_norm_.bias, p + "ln_f.bias", {d});
    torch::Tensor unused;
    if (ckpt.Has("lm_head.weight")) MNEMO_TAKE(unused, "lm_head.weight", {V, d});
  } else {
    MNEMO_TAKE(net->embed_, "model.embed_tokens.weight", {V, d});
    for (int i = 0; i < config.n_layers; ++i) {
      DecoderLayer& l = net->layers_[i];
      const std::string p = absl::StrCat("model.layers.", i, ".");
      MNEMO_TAKE(l.attn_norm.weight, p + "input_layernorm.weight", {d});
      MNEMO_TAKE(l.mlp_norm.weight, p + "post_attention_layernorm.weight", {d});
      torch::Tensor q, k, v;
      MNEMO_TAKE(q, p + "self_attn.q_proj.weight", {q_width, d});
      MNEMO_TAKE(k, p + "self_attn.k_proj.weight", {kv_width, d});
      MNEMO_TAKE(v, p + "self_attn.v_proj.weight", {kv_width, d});
      l.qkv.weight = torch::cat({q, k, v}, 0);
      if (dc.qkv_bias) {
        MNEMO_TAKE(q, p + "self_attn.q_proj.bias", {q_width});
        MNEMO_TAKE(k, p + "self_attn.k_proj.bias", {kv_width});
        MNEMO_TAKE(v, p + "self_attn.v_proj.bias", {kv_width});
        l.qkv.bias = torch::cat({q, k, v}, 0);
      }
      MNEMO_TAKE(l.out.weight, p + "self_attn.o_proj.weight", {d, q_width});
      if (dc.out_bias) MNEMO_TAKE(l.out.bias, p + "self_attn.o_proj.bias", {d});
      torch::Tensor gate, up;
      MNEMO_TAKE(gate, p + "mlp.gate_proj.weight", {ff, d});
      MNEMO_TAKE(up, p + "mlp.up_proj.weight", {ff, d});
      l.gate_up.weight = torch::cat({gate, up}, 0);
      MNEMO_TAKE(l.down.weight, p + "mlp.down_proj.weight", {d, ff});
      if (dc.mlp_bias) {
        MNEMO_TAKE(gate, p + "mlp.gate_proj.bias", {ff});
        MNEMO_TAKE(up, p + "mlp.up_proj.bias", {ff});
        l.gate_up.bias = torch::cat({gate, up}, 0);
        MNEMO_TAKE(l.down.bias, p + "mlp.down_proj.bias", {d});
      }
    }
    MNEMO_TAKE(net->final_norm_.weight, "model.norm.weight", {d});
    if (!dc.tied_head) {
      MNEMO_TAKE(net->head_.weight, "lm_head.weight", {V, d});
    } else if (ckpt.Has("lm_head.weight")) {
      torch::Tensor unused;
      MNEMO_TAKE(unused, "lm_head.weight", {V, d});
    }
  }
#undef MNEMO_TAKE
  if (!net->head_.weight.defined()) net->head_.weight = net->embed_;
  if (absl::Status s = ckpt.Finish(); !s.ok()) return s;
  return net;
}

std::unique_ptr<DecoderNetwork> DecoderNetwork::Random(const ModelConfig& config, uint64_t seed) {
  std::unique_ptr<DecoderNetwork> net(new DecoderNetwork(config));
  const DecoderConfig& dc = config.decoder;
  torch::manual_seed(seed);
  const int64_t d = config.d_model, V = config.vocab_size, ff = config.d_ff;
  const int64_t q_width = int64_t{config.n_heads} * config.d_head;
  const int64_t kv_width = int64_t{dc.n_kv_heads} * config.d_head;
  auto normal = [](std::vector<int64_t> shape) { return torch::randn(shape) * 0.1; };
  auto norm = [&dc, d](Norm& n) {
    n.weight = torch::ones({d});
    if (dc.layer_norm) n.bias = torch::zeros({d});
  };
  net->embed_ = normal({V, d});
  if (dc.positions == PositionKind::kLearned) net->positions_ = normal({dc.max_positions, d});
  for (DecoderLayer& l : net->layers_) {
    norm(l.attn_norm);
    norm(l.mlp_norm);
    l.qkv.weight = normal({q_width + 2 * kv_width, d});
    if (dc.qkv_bias) l.qkv.bias = normal({q_width + 2 * kv_width});
    l.out.weight = normal({d, q_width});
    if (dc.out_bias) l.out.bias = normal({d});
    l.gate_up.weight = normal({dc.gelu_mlp ? ff : 2 * ff, d});
    if (dc.mlp_bias) l.gate_up.bias = normal({dc.gelu_mlp ? ff : 2 * ff});
    l.down.weight = normal({d, ff});
    if (dc.mlp_bias) l.down.bias = normal({d});
  }
  norm(net->final_norm_);
  net->head_.weight = dc.tied_head ? net->embed_ : normal({V, d});
  return net;
}

std::vector<torch::Tensor*> DecoderNetwork::Parameters() {
  std::vector<torch::Tensor*> out = {&embed_, &positions_};
  for (DecoderLayer& l : layers_) {
    for (torch::Tensor* t :
         {&l.attn_norm.weight, &l.attn_norm.bias, &l.mlp_norm.weight, &l.mlp_norm.bias,
          &l.qkv.weight, &l.qkv.bias, &l.out.weight, &l.out.bias, &l.gate_up.weight,
          &l.gate_up.bias, &l.down.weight, &l.down.bias}) {
      out.push_back(t);
    }
  }
  out.push_back(&final_norm_.weight);
  out.push_back(&final_norm_.bias);
  if (!head_.weight.is_same(embed_)) out.push_back(&head_.weight);
  std::vector<torch::Tensor*> defined;
  for (torch::Tensor* t : out) {
    if (t->defined()) defined.push_back(t);
  }
  return defined;
}

std::vector<const torch::Tensor*> DecoderNetwork::Parameters() const {
  std::vector<const torch::Tensor*> out;
  for (torch::Tensor* t : const_cast<DecoderNetwork*>(this)->Parameters()) out.push_back(t);
  return out;
}

int64_t DecoderNetwork::ParameterCount() const {
  int64_t total = 0;
  for (const torch::Tensor* t : Parameters()) total += t->numel();
  return total;
}

std::string DecoderNetwork::WeightsChecksum() const {
  // Parameters() has a fixed order: its index names each weight.
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const torch::Tensor* t : Parameters()) named.emplace_back(absl::StrCat(named.size()), *t);
  return model::WeightsChecksum(named);
}

absl::Status DecoderNetwork::PrepareForServing(const torch::Device& device,
                                               torch::ScalarType weight_dtype) {
  torch::NoGradGuard no_grad;
  if (weight_dtype != torch::kFloat32) {
    constexpr double kHalfMax = 65504.0;
    if (weight_dtype == torch::kFloat16) {
      for (const torch::Tensor* t : Parameters()) {
        if (t->abs().max().item<double>() > kHalfMax) {
          return absl::InvalidArgumentError(absl::StrCat(
              "model ", config_.name,
              " has weights beyond float16's range (|w| > 65504): weight_dtype float16 cannot "
              "hold them; use bfloat16"));
        }
      }
    }
    for (torch::Tensor* t : Parameters()) t->copy_(t->to(weight_dtype));
  }
  const bool tied = head_.weight.is_same(embed_);
  for (torch::Tensor* t : Parameters()) *t = t->to(device);
  if (tied) head_.weight = embed_;
  for (DecoderLayer& l : layers_) {
    for (Linear* linear : {&l.qkv, &l.out, &l.gate_up, &l.down}) linear->Pack(weight_dtype);
  }
  head_.Pack(weight_dtype);
  return absl::OkStatus();
}

absl::Status DecoderNetwork::Save(const std::string& /*dir*/, const ModelConfig& /*config*/) const {
  return absl::UnimplementedError(absl::StrCat(
      config_.decoder.architecture, " models are served from their Hugging Face folder; mnemo "
      "does not write them"));
}

}  // namespace mnemo::model::hf
