#include "engine/model/relative_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/model/host_attention.h"

namespace mnemo::model {
namespace {

// Normalised dot products lie in [-1, 1]: a scale of 8 gives a usefully peaked softmax from the
// start; a gate of sigmoid(-2) = 0.12 keeps early, noisy retrievals from swamping local context.
constexpr float kKnnScaleInit = 8.0f;
constexpr float kKnnGateInit = -2.0f;

}  // namespace

RelativeAttentionImpl::RelativeAttentionImpl(const ModelConfig& config, int layer)
    : heads_(config.n_heads),
      d_head_(config.d_head),
      cmem_rate_(config.cmem_rate),
      compression_(config.compression),
      scale_(1.0f / std::sqrt(static_cast<float>(config.d_head))),
      knn_topk_(config.knn_topk) {
  const int64_t inner = int64_t{heads_} * d_head_;
  qkv_ = register_module(
      "qkv", torch::nn::Linear(torch::nn::LinearOptions(config.d_model, 3 * inner).bias(false)));
  out_ = register_module(
      "out", torch::nn::Linear(torch::nn::LinearOptions(inner, config.d_model).bias(false)));
  r_net_ = register_module(
      "r_net", torch::nn::Linear(torch::nn::LinearOptions(config.d_model, inner).bias(false)));
  u_bias_ = register_parameter("u_bias", torch::zeros({heads_, d_head_}));
  v_bias_ = register_parameter("v_bias", torch::zeros({heads_, d_head_}));
  if (config.cmem_len > 0 && compression_ == Compression::kConv) {
    auto options = torch::nn::Conv1dOptions(inner, inner, cmem_rate_).stride(cmem_rate_);
    compress_k_ = register_module("compress_k", torch::nn::Conv1d(options));
    compress_v_ = register_module("compress_v", torch::nn::Conv1d(options));
  }
  if (layer == config.knn_layer) {
    knn_scale_ = register_parameter("knn_scale", torch::full({heads_}, kKnnScaleInit));
    knn_gate_ = register_parameter("knn_gate", torch::full({heads_}, kKnnGateInit));
  }
}

torch::Tensor RelativeAttentionImpl::TakeReconstructionLoss() {
  torch::Tensor loss = reconstruction_loss_;
  reconstruction_loss_ = torch::Tensor();
  return loss;
}

void RelativeAttentionImpl::AddReconstructionLoss(const torch::Tensor& q,
                                                  const torch::Tensor& k_groups,
                                                  const torch::Tensor& v_groups) {
  torch::Tensor qd = q.detach(), kd = k_groups.detach(), vd = v_groups.detach();
  // [B, H, S, n * rate] and [B, H, S, n] attention of the segment's queries
  torch::Tensor old_out = torch::matmul(torch::softmax(torch::matmul(qd, kd.transpose(2, 3)) * scale_, 3), vd);
  torch::Tensor ck = Compress(kd, /*keys=*/true), cv = Compress(vd, /*keys=*/false);
  torch::Tensor new_out = torch::matmul(torch::softmax(torch::matmul(qd, ck.transpose(2, 3)) * scale_, 3), cv);
  torch::Tensor loss = (new_out - old_out).pow(2).mean();
  reconstruction_loss_ = reconstruction_loss_.defined() ? reconstruction_loss_ + loss : loss;
}

torch::Tensor RelativeAttentionImpl::PositionTable(const torch::Tensor& sinusoid) {
  if (position_table_.defined()) return position_table_;
  const int64_t distances = sinusoid.size(0);
  // [D, H * d_head] -> [H, D, d_head]
  return r_net_->forward(sinusoid).view({distances, heads_, d_head_}).permute({1, 0, 2});
}

void RelativeAttentionImpl::CachePositionTable(const torch::Tensor& sinusoid,
                                               torch::ScalarType strip_type) {
  torch::NoGradGuard no_grad;
  position_table_ = torch::Tensor();
  position_table_ = PositionTable(sinusoid).contiguous();
  packed_qkv_ = PackedLinear(qkv_->weight, qkv_->bias, strip_type);
  packed_out_ = PackedLinear(out_->weight, out_->bias, strip_type);
  if (compression_ == Compression::kConv) {
    // The kernels themselves (a view would be a different tensor to Current()).
    packed_compress_k_ = PackedLinear(compress_k_->weight, compress_k_->bias, strip_type);
    packed_compress_v_ = PackedLinear(compress_v_->weight, compress_v_->bias, strip_type);
  }
}

void RelativeAttentionImpl::ClearPositionTable() {
  position_table_ = torch::Tensor();
  packed_qkv_ = packed_out_ = packed_compress_k_ = packed_compress_v_ = PackedLinear();
}

void RelativeAttentionImpl::AppendInferenceBuffers(std::vector<torch::Tensor*>& buffers) {
  if (position_table_.defined()) buffers.push_back(&position_table_);
  for (PackedLinear* packed :
       {&packed_qkv_, &packed_out_, &packed_compress_k_, &packed_compress_v_}) {
    packed->AppendBuffers(buffers);
  }
}

torch::Tensor RelativeAttentionImpl::Compress(const torch::Tensor& grouped, bool keys) {
  const int64_t batch = grouped.size(0), n = grouped.size(2) / cmem_rate_;
  switch (compression_) {
    case Compression::kMean:
      return grouped.view({batch, heads_, n, cmem_rate_, d_head_}).mean(3);
    case Compression::kMax:
      return std::get<0>(grouped.view({batch, heads_, n, cmem_rate_, d_head_}).max(3));
    case Compression::kConv: {
      // A conv with kernel = stride = rate over channels H*dh is one matmul per group: group
      // inputs [B*n, H*dh*rate] (channel-major, then tap) times the kernel [H*dh, H*dh*rate]ᵀ.
      // (As a matmul it is also far cheaper than the convolution primitive for a few groups.)
      const torch::nn::Conv1d& conv = keys ? compress_k_ : compress_v_;
      const PackedLinear& packed = keys ? packed_compress_k_ : packed_compress_v_;
      const int64_t channels = heads_ * d_head_;
      torch::Tensor inputs = grouped.view({batch, heads_, n, cmem_rate_, d_head_})
                                 .permute({0, 2, 1, 4, 3})  // [B, n, H, dh, rate]
                                 .reshape({batch * n, channels * cmem_rate_});
      torch::Tensor pooled =
          packed.Accepts(inputs) && packed.Current(conv->weight, conv->bias)
              ? packed.Apply(inputs)
              : torch::addmm(conv->bias, inputs, conv->weight.view({channels, channels * cmem_rate_}).t());
      return pooled.view({batch, n, heads_, d_head_}).permute({0, 2, 1, 3});  // [B, H, n, dh]
    }
  }
  return grouped;
}

bool RelativeAttentionImpl::PrefillOnHost(const torch::Tensor& x,
                                          const memory::LayerMemory& memory) const {
  return position_table_.defined() && !torch::GradMode::is_enabled() && x.size(0) == 1 &&
         x.device().is_cpu() && x.scalar_type() == torch::kFloat32 &&
         HostAttentionReads(memory.k_raw()) &&
         memory.k_raw().is_contiguous() && memory.v_raw().is_contiguous() &&
         (!memory.k_cmp().defined() ||
          (memory.k_cmp().is_contiguous() && memory.v_cmp().is_contiguous()));
}

torch::Tensor RelativeAttentionImpl::PrefillAttendHost(const torch::Tensor& qkv,
                                                       const memory::LayerMemory& memory,
                                                       const memory::SegmentPlan& plan,
                                                       int64_t raw_used, int64_t cmp_used) {
  TORCH_CHECK(qkv.is_contiguous(), "host prefill: qkv must be contiguous");
  const int64_t length = qkv.size(1);
  const int64_t inner = int64_t{heads_} * d_head_;
  // Each query's visible slots as runs of consecutive ring slots (raw, then compressed, the op
  // path's order) and their distances.
  std::vector<std::vector<RingSpan>> spans(length);
  std::vector<std::vector<int64_t>> distances(length);
  auto add_visible = [&](const torch::Tensor& mask, const torch::Tensor& distance, int64_t used,
                         bool compressed) {
    const torch::Tensor m = mask.contiguous(), d = distance.contiguous();  // [1, 1, S, C], [S, C]
    const int64_t capacity = m.size(3);
    for (int64_t s = 0; s < length; ++s) {
      AppendVisibleRuns(m.data_ptr<bool>() + s * capacity, d.data_ptr<int64_t>() + s * capacity,
                        used, compressed, spans[s], distances[s]);
    }
  };
  add_visible(plan.raw_mask, plan.raw_distance, raw_used, /*compressed=*/false);
  if (cmp_used > 0) add_visible(plan.cmp_mask, plan.cmp_distance, cmp_used, /*compressed=*/true);

  std::vector<HostAttentionRow> rows(length);
  for (int64_t s = 0; s < length; ++s) {
    HostAttentionRow& row = rows[s];
    row.query = qkv.data_ptr<float>() + s * 3 * inner;  // q is the first third of each row
    row.query_head_stride = d_head_;
    row.ring_type = HostRingType(memory.k_raw());
    row.k_raw = memory.k_raw().data_ptr();
    row.v_raw = memory.v_raw().data_ptr();
    row.raw_capacity = memory.k_raw().size(2);
    if (memory.k_cmp().defined()) {
      row.k_cmp = memory.k_cmp().data_ptr();
      row.v_cmp = memory.v_cmp().data_ptr();
      row.cmp_capacity = memory.k_cmp().size(2);
    }
    row.spans = spans[s];
    row.distances = distances[s];
  }
  HostAttentionShape shape;
  shape.heads = heads_;
  shape.d_head = d_head_;
  shape.table_rows = position_table_.size(1);
  shape.scale = scale_;
  torch::Tensor y = torch::empty({length, inner}, qkv.options());
  HostAttention(u_bias_.data_ptr<float>(), v_bias_.data_ptr<float>(),
                position_table_.data_ptr<float>(), shape, rows, y.data_ptr<float>());
  return y;
}

torch::Tensor RelativeAttentionImpl::Attend(const torch::Tensor& q,
                                            const memory::LayerMemory& memory,
                                            const memory::SegmentPlan& plan,
                                            const torch::Tensor& sinusoid) {
  const int64_t batch = q.size(0), length = q.size(2);
  // Only ring slots that were ever written can be visible: positions start at 0 and a
  // position's slot is position % capacity, so they are a prefix of each ring. And no distance
  // exceeds the newest position. Attending over just those is the same function (the rest is
  // masked) and much less work while a session is young (a 64-token prompt: 64 of 512 slots).
  const int64_t newest = plan.start + length;  // positions [0, newest) exist
  const int64_t raw_used = std::min<int64_t>(newest, memory.k_raw().size(2));
  const int64_t cmp_used = memory.k_cmp().defined() ? plan.cmp_filled_after : 0;
  torch::Tensor qu = q + u_bias_.view({1, heads_, 1, d_head_});  // [B, H, S, dh]
  torch::Tensor qv = q + v_bias_.view({1, heads_, 1, d_head_});
  torch::Tensor table = PositionTable(sinusoid);  // [H, D, dh]
  table = table.narrow(1, 0, std::min<int64_t>(newest, table.size(1)));
  // Position scores for every distance, then picked per key: [B, H, S, D']
  torch::Tensor by_distance = torch::matmul(qv, table.transpose(1, 2).unsqueeze(0));

  // Raw keys, then compressed ones, as one key set: one product for the content scores, one
  // gather for the position scores and one product for the values. (Separate raw and compressed
  // products, then concatenated scores and narrowed probabilities, cost training a gather
  // backward, a [B, H, S, keys] concatenation and two zero-filled slice gradients per layer.)
  torch::Tensor keys = memory.k_raw().narrow(2, 0, raw_used);
  torch::Tensor values = memory.v_raw().narrow(2, 0, raw_used);
  torch::Tensor distance = plan.raw_distance.narrow(1, 0, raw_used);  // [S, keys]
  torch::Tensor mask = plan.raw_mask.narrow(3, 0, raw_used);          // [R, 1, S, keys]
  if (cmp_used > 0) {
    keys = torch::cat({keys, memory.k_cmp().narrow(2, 0, cmp_used)}, 2);
    values = torch::cat({values, memory.v_cmp().narrow(2, 0, cmp_used)}, 2);
    distance = torch::cat({distance, plan.cmp_distance.narrow(1, 0, cmp_used)}, 1);
    mask = torch::cat({mask, plan.cmp_mask.narrow(3, 0, cmp_used)}, 3);
  }
  const int64_t visible = raw_used + cmp_used;
  // [B, H, S, keys]
  torch::Tensor scores =
      torch::matmul(qu, keys.to(torch::kFloat32).transpose(2, 3)) +
      by_distance.gather(3, distance.expand({batch, heads_, length, visible}));
  // In place: the scaled scores are a temporary no backward function keeps, and an out-of-place
  // fill would copy a [B, H, S, keys] tensor per layer.
  scores = (scores * scale_).masked_fill_(mask.logical_not(),
                                          -std::numeric_limits<float>::infinity());
  torch::Tensor probs = torch::softmax(scores, 3);
  torch::Tensor y = torch::matmul(probs, values.to(torch::kFloat32));  // [B, H, S, dh]
  return y;
}

torch::Tensor RelativeAttentionImpl::forward(const torch::Tensor& x, memory::LayerWrite write,
                                             const torch::Tensor& sinusoid) {
  const memory::LayerMemory& memory = write.memory();
  const memory::SegmentPlan& plan = write.plan();
  const int64_t batch = x.size(0), length = x.size(1);
  // [B, S, 3 * H * dh] -> 3 x [B, H, S, dh]
  const torch::Tensor qkv_rows = LinearForward(qkv_, packed_qkv_, x);
  auto qkv = qkv_rows.view({batch, length, 3, heads_, d_head_}).permute({2, 0, 3, 1, 4});
  torch::Tensor q = qkv[0], k = qkv[1], v = qkv[2];

  // Append: O(S * d) writes into the preallocated rings (float16 rings round as they store).
  write.WriteRaw(k, v);
  const bool compressive = memory.k_cmp().defined();
  if (compressive && plan.new_groups > 0) {
    torch::Tensor k_groups =
        memory.k_raw().index_select(2, plan.group_source_slots).to(torch::kFloat32);
    torch::Tensor v_groups =
        memory.v_raw().index_select(2, plan.group_source_slots).to(torch::kFloat32);
    // Slots are stored detached: the compression net learns from reconstruction alone.
    write.WriteCompressed(Compress(k_groups, /*keys=*/true).detach(),
                          Compress(v_groups, /*keys=*/false).detach());
    if (is_training() && compression_ == Compression::kConv) {
      AddReconstructionLoss(q, k_groups, v_groups);
    }
  }

  if (PrefillOnHost(x, memory)) {
    // The slots that were ever written (see Attend).
    const int64_t raw_used = std::min<int64_t>(plan.start + length, memory.k_raw().size(2));
    const int64_t cmp_used = compressive ? plan.cmp_filled_after : 0;
    torch::Tensor y = PrefillAttendHost(qkv_rows, memory, plan, raw_used, cmp_used);  // [S, H dh]
    if (knn_scale_.defined() && (memory.k_knn().defined() || memory.knn_store() != nullptr)) {
      y = MixKnn(q, k, v, y.view({1, length, heads_, d_head_}).permute({0, 2, 1, 3}), write)
              .transpose(1, 2)
              .reshape({1, length, heads_ * d_head_});
    }
    return LinearForward(out_, packed_out_, y.view({1, length, heads_ * d_head_}));
  }
  torch::Tensor y = Attend(q, memory, plan, sinusoid);  // [B, H, S, dh]
  if (knn_scale_.defined() && (memory.k_knn().defined() || memory.knn_store() != nullptr)) {
    y = MixKnn(q, k, v, y, write);
  }
  // [B, H, S, dh] -> [B, S, H * dh] -> [B, S, d_model]
  return LinearForward(out_, packed_out_,
                       y.transpose(1, 2).reshape({batch, length, heads_ * d_head_}));
}

}  // namespace mnemo::model
