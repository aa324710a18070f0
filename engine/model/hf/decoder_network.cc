#include "engine/model/hf/decoder_network.h"

#include <c10/core/InferenceMode.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/model/exit_confidence.h"
#include "engine/model/exit_rule.h"
#include "engine/model/host_attention.h"

namespace mnemo::model::hf {
namespace {

constexpr double kPi = 3.14159265358979323846;

// RoPE frequencies as transformers computes them (float32), then scaled per rope_type.
std::vector<double> RotaryFrequencies(const ModelConfig& config) {
  const DecoderConfig& d = config.decoder;
  const int half = config.d_head / 2;
  std::vector<double> inv(half);
  for (int i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(config.d_head);
    inv[i] = static_cast<double>(1.0f / std::pow(static_cast<float>(d.rope_theta), exponent));
  }
  if (d.rope_scaling == RopeScaling::kLinear) {
    for (double& f : inv) f /= d.rope_factor;
  } else if (d.rope_scaling == RopeScaling::kLlama3) {
    // Llama 3.1's scaling: long wavelengths divided by the factor, short ones kept, the band
    // between blended.
    const double old_len = d.rope_original_max_positions;
    const double low_wavelen = old_len / d.rope_low_freq_factor;
    const double high_wavelen = old_len / d.rope_high_freq_factor;
    for (double& f : inv) {
      const double wavelen = 2 * kPi / f;
      if (wavelen > low_wavelen) {
        f = f / d.rope_factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (old_len / wavelen - d.rope_low_freq_factor) /
                              (d.rope_high_freq_factor - d.rope_low_freq_factor);
        f = (1 - smooth) * f / d.rope_factor + smooth * f;
      }
      f = static_cast<double>(static_cast<float>(f));
    }
  }
  // transformers holds the frequencies as a buffer of the model's dtype: a checkpoint saved in
  // bfloat16 or float16 (config.json dtype), loaded as such, computes RoPE from frequencies
  // rounded to it. The reference outputs for such checkpoints are those; so are ours.
  for (double& f : inv) {
    if (d.dtype == "bfloat16") f = static_cast<float>(c10::BFloat16(static_cast<float>(f)));
    if (d.dtype == "float16") f = static_cast<float>(c10::Half(static_cast<float>(f)));
  }
  return inv;
}

torch::Tensor Silu(const torch::Tensor& x) { return x * torch::sigmoid(x); }

}  // namespace

torch::Tensor Linear::operator()(const torch::Tensor& x) const {
  if (packed.defined() && packed.Accepts(x) && packed.Current(weight, bias)) {
    return packed.Apply(x);
  }
  return torch::nn::functional::linear(x, weight, bias);
}

void Linear::Pack(torch::ScalarType strip_type) { packed = PackedLinear(weight, bias, strip_type); }

torch::Tensor Norm::operator()(const torch::Tensor& x) const {
  if (bias.defined()) {
    return torch::layer_norm(x, {x.size(-1)}, weight, bias, eps);
  }
  torch::Tensor variance = x.pow(2).mean(-1, /*keepdim=*/true);
  return weight * (x * torch::rsqrt(variance + eps));
}

DecoderNetwork::DecoderNetwork(const ModelConfig& config)
    : config_(config),
      heads_(config.n_heads),
      kv_heads_(config.decoder.n_kv_heads),
      d_head_(config.d_head) {
  if (config.decoder.positions == PositionKind::kRotary) inv_freq_ = RotaryFrequencies(config);
  final_norm_.eps = config.decoder.norm_eps;
  layers_.resize(config.n_layers);
  for (DecoderLayer& layer : layers_) layer.attn_norm.eps = layer.mlp_norm.eps = config.decoder.norm_eps;
}

void DecoderNetwork::Rotary(const std::vector<int64_t>& positions, torch::Tensor& cos,
                            torch::Tensor& sin) const {
  const int64_t n = static_cast<int64_t>(positions.size());
  const int64_t half = static_cast<int64_t>(inv_freq_.size());
  cos = torch::empty({n, half}, torch::kFloat32);
  sin = torch::empty({n, half}, torch::kFloat32);
  float* c = cos.data_ptr<float>();
  float* s = sin.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < half; ++j) {
      // In double: a position in the millions keeps its angle exact to float32.
      const double angle = static_cast<double>(positions[i]) * inv_freq_[j];
      c[i * half + j] = static_cast<float>(std::cos(angle));
      s[i * half + j] = static_cast<float>(std::sin(angle));
    }
  }
}

torch::Tensor DecoderNetwork::Rotate(const torch::Tensor& x, const torch::Tensor& cos,
                                     const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  torch::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return torch::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1);
}

torch::Tensor DecoderNetwork::EmbedSegment(const torch::Tensor& tokens, int64_t start) {
  const int64_t S = tokens.size(1);
  torch::Tensor h = embed_.index_select(0, tokens.reshape({-1})).view({1, S, -1});
  if (positions_.defined()) {
    TORCH_CHECK(config_.decoder.sink_tokens > 0 || start + S <= positions_.size(0),
                config_.decoder.architecture, " sees at most ", positions_.size(0),
                " positions (n_positions); this sequence reaches ", start + S);
    if (LearnedPosition(start + S - 1) == start + S - 1) {
      h = h + positions_.narrow(0, start, S).unsqueeze(0);
    } else {
      std::vector<int64_t> rows(S);
      for (int64_t s = 0; s < S; ++s) rows[s] = LearnedPosition(start + s);
      h = h + positions_.index_select(0, torch::tensor(rows, torch::kInt64).to(h.device()))
                  .unsqueeze(0);
    }
  }
  return h;
}

int64_t DecoderNetwork::LearnedPosition(int64_t p) const {
  const int64_t sinks = config_.decoder.sink_tokens;
  if (sinks == 0) return p;
  return std::min({p, sinks + config_.mem_len, positions_.size(0) - 1});
}

torch::Tensor DecoderNetwork::FeedForward(const DecoderLayer& layer, const torch::Tensor& x) const {
  if (config_.decoder.gelu_mlp) {
    return layer.down(torch::gelu(layer.gate_up(x), "tanh"));
  }
  torch::Tensor gu = layer.gate_up(x);
  const int64_t ff = config_.d_ff;
  return layer.down(Silu(gu.narrow(-1, 0, ff)) * gu.narrow(-1, ff, ff));
}

torch::Tensor DecoderNetwork::LayerForward(int index, const torch::Tensor& h,
                                           memory::LayerWrite write, const torch::Tensor& cos,
                                           const torch::Tensor& sin, torch::Tensor* ffn_input) {
  const DecoderLayer& layer = layers_[index];
  const int64_t S = h.size(1), G = heads_ / kv_heads_;
  torch::Tensor qkv = layer.qkv(layer.attn_norm(h));  // [1, S, (H + 2 Hkv) dh]
  torch::Tensor q = qkv.narrow(-1, 0, heads_ * d_head_).view({1, S, heads_, d_head_}).transpose(1, 2);
  torch::Tensor k = qkv.narrow(-1, heads_ * d_head_, kv_heads_ * d_head_)
                        .view({1, S, kv_heads_, d_head_}).transpose(1, 2);
  torch::Tensor v = qkv.narrow(-1, (heads_ + kv_heads_) * d_head_, kv_heads_ * d_head_)
                        .view({1, S, kv_heads_, d_head_}).transpose(1, 2);
  const torch::Tensor q_unrotated = q;  // sinks rotate it to positions of their own
  if (cos.defined()) {
    q = Rotate(q, cos, sin);  // [1, H, S, dh]
    k = Rotate(k, cos, sin);  // [1, Hkv, S, dh]
  }
  write.WriteRaw(k, v);
  const memory::LayerMemory& m = write.memory();
  const int64_t R = m.k_raw().size(2);
  torch::Tensor keys = m.k_raw().to(torch::kFloat32);    // [1, Hkv, R, dh]
  torch::Tensor values = m.v_raw().to(torch::kFloat32);
  // Grouped queries: head h reads key/value head h / G.
  torch::Tensor qg = q.reshape({1, kv_heads_, G * S, d_head_});
  torch::Tensor scores = torch::matmul(qg, keys.transpose(-1, -2)) *
                         static_cast<float>(1.0 / std::sqrt(static_cast<double>(d_head_)));
  scores = scores.view({1, kv_heads_, G, S, R});
  const torch::Tensor& mask = write.plan().raw_mask;  // [1, 1, S, R]
  scores.masked_fill_(mask.unsqueeze(2).logical_not(), -std::numeric_limits<float>::infinity());
  torch::Tensor sink_scores, sink_values;  // [1, Hkv, G, S, V], [1, Hkv, V, dh]
  PrefillSinks(q_unrotated, m, write.plan().start, sink_scores, sink_values);
  torch::Tensor y;
  if (!sink_scores.defined()) {
    torch::Tensor p = torch::softmax(scores, -1).view({1, kv_heads_, G * S, R});
    y = torch::matmul(p, values);  // [1, Hkv, G S, dh]
  } else {
    const int64_t V = sink_scores.size(-1);
    torch::Tensor p = torch::softmax(torch::cat({scores, sink_scores}, -1), -1);
    y = torch::matmul(p.narrow(-1, 0, R).reshape({1, kv_heads_, G * S, R}), values) +
        torch::matmul(p.narrow(-1, R, V).reshape({1, kv_heads_, G * S, V}), sink_values);
  }
  y = y.view({1, heads_, S, d_head_}).transpose(1, 2).reshape({1, S, heads_ * d_head_});
  torch::Tensor x = h + layer.out(y);
  torch::Tensor normed = layer.mlp_norm(x);
  if (ffn_input != nullptr) *ffn_input = normed;
  return x + FeedForward(layer, normed);
}

void DecoderNetwork::PrefillSinks(const torch::Tensor& q, const memory::LayerMemory& m,
                                  int64_t start, torch::Tensor& scores,
                                  torch::Tensor& values) const {
  const int64_t K = config_.decoder.sink_tokens, mem_len = config_.mem_len;
  const int64_t S = q.size(2), G = heads_ / kv_heads_;
  // Sinks the segment's last query sees: those that left its window.
  const int64_t visible = std::min<int64_t>(K, start + S - 1 - mem_len);
  if (K == 0 || visible <= 0) return;
  // StreamingLLM's positions inside the cache: query t sees the c = min(K, t - mem_len) sinks
  // that left its window at their own positions 0..c-1 and its window right after them, so it
  // sits at position c + mem_len = min(t, K + mem_len). Sink keys are stored rotated at their
  // absolute positions, which are their cache positions; the query is rotated to its own.
  // Learned positions (no rotation): the query was embedded at that cache position already
  // (LearnedPosition), and the sinks at theirs.
  torch::Tensor q_sink = q;  // [1, H, S, dh]
  if (!inv_freq_.empty()) {
    std::vector<int64_t> positions(S);
    for (int64_t s = 0; s < S; ++s) positions[s] = std::min(start + s, K + mem_len);
    torch::Tensor cos, sin;
    Rotary(positions, cos, sin);
    q_sink = Rotate(q, cos.to(q.device()), sin.to(q.device()));
  }
  torch::Tensor keys = m.k_sink().narrow(2, 0, visible).to(torch::kFloat32);  // [1, Hkv, V, dh]
  values = m.v_sink().narrow(2, 0, visible).to(torch::kFloat32);
  scores = torch::matmul(q_sink.reshape({1, kv_heads_, G * S, d_head_}), keys.transpose(-1, -2)) *
           static_cast<float>(1.0 / std::sqrt(static_cast<double>(d_head_)));
  scores = scores.view({1, kv_heads_, G, S, visible});
  // Query s sees sink j < min(K, t_s - mem_len).
  std::vector<uint8_t> allowed(S * visible);
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t j = 0; j < visible; ++j) allowed[s * visible + j] = j < start + s - mem_len;
  }
  torch::Tensor mask = torch::from_blob(allowed.data(), {S, visible}, torch::kUInt8)
                           .to(torch::kBool)
                           .to(q.device());
  scores.masked_fill_(mask.logical_not(), -std::numeric_limits<float>::infinity());
}

int64_t DecoderNetwork::DecodeSinks(const memory::LayerMemory& m, int64_t t,
                                    torch::Tensor& keys) const {
  const int64_t K = config_.decoder.sink_tokens, mem_len = config_.mem_len;
  const int64_t visible = std::min<int64_t>(K, std::max<int64_t>(0, t - mem_len));
  if (visible == 0) return 0;
  // The query is rotated at t; a sink key stored at position j, rotated on by
  // shift = t - (K + mem_len) once all K sinks are out of the window, gives the distance
  // K + mem_len - j the cache assigns (PrefillSinks). Plain loops: a decode step does this per
  // row and layer, where a handful of LibTorch ops would cost more than the attention.
  // Learned positions: nothing to rotate (the keys hold their positions 0..K-1 already).
  const int64_t shift = inv_freq_.empty() ? 0 : std::max<int64_t>(0, t - mem_len - K);
  const torch::Tensor ring = m.k_sink()[0].to(torch::kCPU, torch::kFloat32).contiguous();
  keys = shift == 0 ? ring : torch::empty_like(ring);  // [Hkv, K, dh]
  if (shift > 0) {
    const int64_t half = d_head_ / 2, rows = ring.size(0) * ring.size(1);
    std::vector<float> cos(half), sin(half);
    for (int64_t j = 0; j < half; ++j) {
      const double angle = static_cast<double>(shift) * inv_freq_[j];
      cos[j] = static_cast<float>(std::cos(angle));
      sin[j] = static_cast<float>(std::sin(angle));
    }
    const float* in = ring.data_ptr<float>();
    float* out = keys.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r, in += d_head_, out += d_head_) {
      for (int64_t j = 0; j < half; ++j) {
        out[j] = in[j] * cos[j] - in[j + half] * sin[j];
        out[j + half] = in[j + half] * cos[j] + in[j] * sin[j];
      }
    }
  }
  return visible;
}

void DecoderNetwork::SegmentRotary(int64_t start, int64_t length, const torch::Device& device,
                                   torch::Tensor& cos, torch::Tensor& sin) const {
  if (inv_freq_.empty()) return;
  std::vector<int64_t> positions(length);
  for (int64_t i = 0; i < length; ++i) positions[i] = start + i;
  Rotary(positions, cos, sin);
  cos = cos.to(device);
  sin = sin.to(device);
}

torch::Tensor DecoderNetwork::ForwardSegment(const torch::Tensor& tokens,
                                             memory::SessionMemory& memory,
                                             torch::Tensor* knn_lm_keys) {
  const int64_t S = tokens.size(1), start = memory.next_position();
  torch::Tensor h = EmbedSegment(tokens, start);
  memory::SegmentWrite write = memory.BeginWrite(S);  // abandoned if a layer throws
  torch::Tensor cos, sin;
  SegmentRotary(start, S, h.device(), cos, sin);
  for (int i = 0; i < num_layers(); ++i) {
    torch::Tensor* keys = i + 1 == num_layers() ? knn_lm_keys : nullptr;
    h = LayerForward(i, h, write.layer(i), cos, sin, keys);
  }
  write.Commit();
  return h;
}

torch::Tensor DecoderNetwork::ForwardSegmentWithExit(const torch::Tensor& tokens,
                                                     memory::SessionMemory& memory,
                                                     float threshold, ExitMeasure measure,
                                                     const ExitClassifierImpl* classifier,
                                                     torch::Tensor* exit_layers) {
  const int64_t S = tokens.size(1), start = memory.next_position();
  torch::Tensor h = EmbedSegment(tokens, start);
  memory::SegmentWrite write = memory.BeginWrite(S);
  torch::Tensor cos, sin;
  SegmentRotary(start, S, h.device(), cos, sin);
  const int layers = num_layers();
  torch::Tensor exited = torch::zeros(tokens.sizes(), tokens.options().dtype(torch::kBool));
  torch::Tensor layer_of =
      torch::full(tokens.sizes(), layers, tokens.options().dtype(torch::kInt64));
  auto head = [this](const torch::Tensor& x) { return Logits(x); };
  for (int i = 0; i < layers; ++i) {
    // State propagation: an exited position's frozen state still runs through the layer so
    // its key/value reach this layer's memory; its output is discarded.
    torch::Tensor next = LayerForward(i, h, write.layer(i), cos, sin, nullptr);
    torch::Tensor before = h;
    h = torch::where(exited.unsqueeze(-1), h, next);
    if (i + 1 == layers) break;
    torch::Tensor confidence = ExitConfidence(measure, head, classifier, i, h, before);
    torch::Tensor now = ExitsEarly(confidence, threshold) & exited.logical_not();
    layer_of.masked_fill_(now, i + 1);
    exited = exited | now;
  }
  write.Commit();
  *exit_layers = layer_of;
  return h;
}

torch::Tensor DecoderNetwork::Logits(const torch::Tensor& hidden) {
  return head_(final_norm_(hidden));
}

memory::MemoryShape DecoderNetwork::MemoryShapeFor(const MemoryOptions& options) const {
  memory::MemoryShape shape;
  shape.batch = 1;
  shape.layers = config_.n_layers;
  shape.heads = kv_heads_;
  shape.d_head = d_head_;
  shape.seg_len = config_.seg_len;
  shape.mem_len = config_.mem_len;
  shape.cmem_len = 0;
  shape.cmem_rate = 1;
  shape.max_distance = config_.mem_len;
  shape.knn_layer = -1;
  shape.knn_len = 0;
  shape.half_rings = options.half_rings;
  shape.sink_len = config_.decoder.sink_tokens;
  return shape;
}

memory::SessionMemory DecoderNetwork::NewMemory(const MemoryOptions& options,
                                                const torch::Device& device) const {
  c10::InferenceMode inference;
  return memory::SessionMemory::Create(
      MemoryShapeFor(options), torch::TensorOptions().dtype(torch::kFloat32).device(device));
}

torch::Tensor DecoderNetwork::Embed(const torch::Tensor& tokens) {
  return embed_.index_select(0, tokens);
}

torch::Tensor DecoderNetwork::DecodeLayer(int index, const torch::Tensor& h_in,
                                          DecodeStepState& rows, const ActiveRows& active,
                                          torch::Tensor* ffn_input) {
  const DecoderLayer& layer = layers_[index];
  const int64_t B = h_in.size(0), A = static_cast<int64_t>(active.rows.size());
  const int64_t G = heads_ / kv_heads_;
  std::vector<int64_t> positions(B);
  for (int64_t r = 0; r < B; ++r) positions[r] = rows.plan(r).start;
  torch::Tensor h = h_in;
  if (index == 0 && positions_.defined()) {
    // Learned positions join the embeddings at the first layer's input (Embed has no rows).
    std::vector<int64_t> rows(positions.size());
    for (size_t r = 0; r < positions.size(); ++r) {
      rows[r] = LearnedPosition(positions[r]);
      TORCH_CHECK(rows[r] < positions_.size(0), config_.decoder.architecture, " sees at most ",
                  positions_.size(0), " positions (n_positions)");
    }
    torch::Tensor index_tensor = torch::tensor(rows, torch::kInt64).to(h.device());
    h = h + positions_.index_select(0, index_tensor);
  }
  torch::Tensor qkv = layer.qkv(layer.attn_norm(h));  // [B, (H + 2 Hkv) dh]
  torch::Tensor k = qkv.narrow(-1, heads_ * d_head_, kv_heads_ * d_head_).view({B, kv_heads_, d_head_});
  torch::Tensor v = qkv.narrow(-1, (heads_ + kv_heads_) * d_head_, kv_heads_ * d_head_)
                        .view({B, kv_heads_, d_head_});
  torch::Tensor cos, sin;
  if (!inv_freq_.empty()) {
    Rotary(positions, cos, sin);  // [B, dh / 2]
    cos = cos.to(h.device()).unsqueeze(1);
    sin = sin.to(h.device()).unsqueeze(1);
    k = Rotate(k, cos, sin);
  }
  if (rows.host) {
    // Plain float32 rows [B, Hkv, dh] written straight into each row's ring (no op per row).
    k = k.contiguous();
    v = v.contiguous();
    for (int64_t r = 0; r < B; ++r) {
      rows.writes[r].layer(index).WriteRawPosition(k.data_ptr<float>() + r * kv_heads_ * d_head_,
                                                   v.data_ptr<float>() + r * kv_heads_ * d_head_,
                                                   d_head_, &FloatsToHalves);
    }
  } else {
    for (int64_t r = 0; r < B; ++r) {
      rows.writes[r].layer(index).WriteRaw(k.narrow(0, r, 1).unsqueeze(2),
                                           v.narrow(0, r, 1).unsqueeze(2));
    }
  }
  if (A == 0) return torch::zeros({0, h.size(1)}, h.options());
  torch::Tensor q = qkv.narrow(-1, 0, heads_ * d_head_).view({B, heads_, d_head_});
  if (!active.all) q = q.index_select(0, active.index);
  if (cos.defined()) {
    q = active.all ? Rotate(q, cos, sin)
                   : Rotate(q, cos.index_select(0, active.index), sin.index_select(0, active.index));
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d_head_)));
  torch::Tensor y;  // [A, H dh]
  if (rows.host && q.scalar_type() == torch::kFloat32) {
    // The host kernel over each row's visible slots in place (host_attention.h), grouped.
    q = q.contiguous();
    std::vector<HostAttentionRow> views(A);
    // Rows that see sinks: the sink ring plays the compressed ring's part (these families have
    // none), its keys rotated to the query's cache positions (DecodeSinks).
    std::vector<torch::Tensor> sink_keys(A);
    std::vector<std::vector<RingSpan>> sink_spans(A);
    std::vector<std::vector<int64_t>> sink_distances(A);
    for (int64_t a = 0; a < A; ++a) {
      const int64_t r = active.rows[a];
      const memory::LayerMemory& m = rows.memory(r, index);
      HostAttentionRow& view = views[a];
      view.query = q.data_ptr<float>() + a * heads_ * d_head_;
      view.query_head_stride = d_head_;
      view.ring_type = HostRingType(m.k_raw());
      view.k_raw = m.k_raw().data_ptr();
      view.v_raw = m.v_raw().data_ptr();
      view.raw_capacity = m.k_raw().size(2);
      view.spans = rows.spans[r];
      view.distances = rows.distances[r];
      if (!m.k_sink().defined()) continue;
      const int64_t visible = DecodeSinks(m, rows.plan(r).start, sink_keys[a]);
      if (visible == 0) continue;
      sink_keys[a] = sink_keys[a].to(m.k_sink().scalar_type()).contiguous();
      view.k_cmp = sink_keys[a].data_ptr();
      view.v_cmp = m.v_sink().data_ptr();
      view.cmp_capacity = m.k_sink().size(2);
      sink_spans[a] = rows.spans[r];
      sink_spans[a].push_back(RingSpan{/*compressed=*/true, 0, visible});
      sink_distances[a] = rows.distances[r];
      sink_distances[a].resize(sink_distances[a].size() + visible, 0);
      view.spans = sink_spans[a];
      view.distances = sink_distances[a];
    }
    HostAttentionShape shape;
    shape.heads = heads_;
    shape.d_head = d_head_;
    shape.scale = scale;
    shape.kv_group = G;
    y = torch::empty({A, heads_ * d_head_}, q.options());
    HostAttention(nullptr, nullptr, nullptr, shape, views, y.data_ptr<float>());
  } else {
    y = ReferenceAttend(q, index, rows, active);
  }
  torch::Tensor x = (active.all ? h : h.index_select(0, active.index)) + layer.out(y);
  torch::Tensor normed = layer.mlp_norm(x);
  if (ffn_input != nullptr) *ffn_input = normed;
  return x + FeedForward(layer, normed);
}

torch::Tensor DecoderNetwork::ReferenceAttend(const torch::Tensor& q, int index,
                                              DecodeStepState& rows, const ActiveRows& active) {
  const int64_t A = static_cast<int64_t>(active.rows.size()), G = heads_ / kv_heads_;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d_head_)));
  std::vector<torch::Tensor> outputs;
  outputs.reserve(A);
  for (int64_t a = 0; a < A; ++a) {
    const int64_t r = active.rows[a];
    const memory::LayerMemory& m = rows.memory(r, index);
    const int64_t R = m.k_raw().size(2);
    torch::Tensor keys = m.k_raw()[0].to(torch::kFloat32);    // [Hkv, R, dh]
    torch::Tensor values = m.v_raw()[0].to(torch::kFloat32);
    torch::Tensor scores =
        torch::matmul(q[a].view({kv_heads_, G, d_head_}), keys.transpose(1, 2)) * scale;
    scores.masked_fill_(rows.plan(r).raw_mask.view({1, 1, R}).logical_not(),
                        -std::numeric_limits<float>::infinity());
    torch::Tensor sinks;
    const int64_t visible =
        m.k_sink().defined() ? DecodeSinks(m, rows.plan(r).start, sinks) : 0;
    if (visible > 0) {
      sinks = sinks.narrow(1, 0, visible);  // [Hkv, V, dh]
      scores = torch::cat(
          {scores, torch::matmul(q[a].view({kv_heads_, G, d_head_}), sinks.transpose(1, 2)) * scale},
          -1);
      values = torch::cat({values, m.v_sink()[0].narrow(1, 0, visible).to(torch::kFloat32)}, 1);
    }
    outputs.push_back(torch::matmul(torch::softmax(scores, -1), values).reshape({1, heads_ * d_head_}));
  }
  return A == 1 ? outputs[0] : torch::cat(outputs, 0);
}

}  // namespace mnemo::model::hf
