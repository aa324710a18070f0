// RelativeAttention's batched decode path (see RelativeAttention::Decode). The same function as
// forward() for a one-position segment, row by row: the weight matmuls run once for all rows;
// memory appends, compression inputs, kNN searches and attention are per row because each row
// owns its memory.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/model/host_attention.h"
#include "engine/model/relative_attention.h"

namespace mnemo::model {
namespace {

// ring[0, :, slot, :] = x[row] for a host float32 or float16 ring [1, H, capacity, dh] and x
// [B, H, dh] float32 (rows of dh contiguous): what index_copy_ does (with .to(kHalf) for a
// float16 ring: the same rounding), without the ops.
void WriteSlotHost(const torch::Tensor& x, int64_t row, const torch::Tensor& slots,
                   torch::Tensor& ring) {
  TORCH_CHECK(ring.is_contiguous() && x.stride(2) == 1 && x.scalar_type() == torch::kFloat32,
              "host ring write needs a contiguous ring and float32 rows");
  const int64_t slot = slots.data_ptr<int64_t>()[0];
  const int64_t heads = ring.size(1), capacity = ring.size(2), dh = ring.size(3);
  const float* source = x.data_ptr<float>() + row * x.stride(0);
  if (ring.scalar_type() == torch::kFloat16) {
    auto* target = reinterpret_cast<uint16_t*>(ring.data_ptr<at::Half>());
    for (int64_t h = 0; h < heads; ++h) {
      FloatsToHalves(source + h * x.stride(1), target + (h * capacity + slot) * dh, dh);
    }
    return;
  }
  float* target = ring.data_ptr<float>();
  for (int64_t h = 0; h < heads; ++h) {
    std::memcpy(target + (h * capacity + slot) * dh, source + h * x.stride(1), dh * sizeof(float));
  }
}

}  // namespace

void RelativeAttentionImpl::DecodeAppend(const torch::Tensor& k, const torch::Tensor& v,
                                         int layer, DecodeRows& rows) {
  const int64_t batch = k.size(0);
  std::vector<torch::Tensor> k_groups, v_groups;  // each [1, H, rate, dh]
  std::vector<int64_t> group_rows;
  for (int64_t r = 0; r < batch; ++r) {
    memory::LayerMemory& m = rows.memories[r]->layer(layer);
    const memory::SegmentPlan& plan = rows.plans[r];
    if (rows.host) {
      WriteSlotHost(k, r, plan.raw_write_slots, m.k_raw);
      WriteSlotHost(v, r, plan.raw_write_slots, m.v_raw);
    } else {
      const torch::ScalarType type = m.k_raw.scalar_type();
      m.k_raw.index_copy_(2, plan.raw_write_slots, k.narrow(0, r, 1).unsqueeze(2).to(type));
      m.v_raw.index_copy_(2, plan.raw_write_slots, v.narrow(0, r, 1).unsqueeze(2).to(type));
    }
    if (m.k_cmp.defined() && plan.new_groups > 0) {
      k_groups.push_back(m.k_raw.index_select(2, plan.group_source_slots).to(torch::kFloat32));
      v_groups.push_back(m.v_raw.index_select(2, plan.group_source_slots).to(torch::kFloat32));
      group_rows.push_back(r);
    }
  }
  if (!group_rows.empty()) {
    // Every row completing a group compresses in one call: [G, H, rate, dh] -> [G, H, 1, dh].
    torch::Tensor ck = Compress(torch::cat(k_groups, 0), /*keys=*/true);
    torch::Tensor cv = Compress(torch::cat(v_groups, 0), /*keys=*/false);
    for (size_t g = 0; g < group_rows.size(); ++g) {
      memory::LayerMemory& m = rows.memories[group_rows[g]]->layer(layer);
      const memory::SegmentPlan& plan = rows.plans[group_rows[g]];
      m.k_cmp.index_copy_(2, plan.cmp_write_slots, ck.narrow(0, g, 1).to(m.k_cmp.scalar_type()));
      m.v_cmp.index_copy_(2, plan.cmp_write_slots, cv.narrow(0, g, 1).to(m.v_cmp.scalar_type()));
    }
  }
  if (knn_scale_.defined()) {
    // [B, H, dh] float32 CPU contiguous: row r's [H, dh] keys and values for
    // knn::KnnMemory::AppendOne (the keys L2-normalised per head, as Forward stores them).
    torch::Tensor kn = (k / k.norm(2, -1, true).clamp_min(1e-6)).to(torch::kCPU, torch::kFloat32).contiguous();
    torch::Tensor vc = v.to(torch::kCPU, torch::kFloat32).contiguous();
    const int64_t row_size = kn.size(1) * kn.size(2);
    for (int64_t r = 0; r < batch; ++r) {
      memory::LayerMemory& m = rows.memories[r]->layer(layer);
      if (m.knn_store == nullptr) continue;
      TORCH_CHECK(m.knn_store->next_position() == rows.plans[r].start, "kNN store is at position ",
                  m.knn_store->next_position(), " but the row is at ", rows.plans[r].start);
      absl::Status appended = m.knn_store->AppendOne(kn.data_ptr<float>() + r * row_size,
                                                     vc.data_ptr<float>() + r * row_size);
      TORCH_CHECK(appended.ok(), "kNN store: ", appended.ToString());
    }
  }
}

torch::Tensor RelativeAttentionImpl::DecodeAttendPerRow(const torch::Tensor& qu,
                                                        const torch::Tensor& bd, int layer,
                                                        DecodeRows& rows,
                                                        const ActiveRows& active) {
  std::vector<torch::Tensor> outputs;  // each [H, 1, dh]
  outputs.reserve(active.rows.size());
  for (size_t a = 0; a < active.rows.size(); ++a) {
    const int64_t r = active.rows[a];
    memory::LayerMemory& m = rows.memories[r]->layer(layer);
    const std::vector<RingSpan>& spans = rows.spans[r];
    auto slice = [&](const torch::Tensor& ring, const RingSpan& span) {  // [H, length, dh]
      return ring[0].narrow(1, span.start, span.length).to(torch::kFloat32);
    };
    torch::Tensor query = qu.narrow(1, a, 1);  // [H, 1, dh]
    // Only the slots this query may see: nothing masked is read.
    std::vector<torch::Tensor> parts;  // each [H, 1, length]
    for (const RingSpan& span : spans) {
      parts.push_back(torch::bmm(query, slice(span.compressed ? m.k_cmp : m.k_raw, span).transpose(1, 2)));
    }
    torch::Tensor scores = parts.size() == 1 ? parts[0] : torch::cat(parts, 2);
    scores = scores + bd.narrow(1, a, 1).gather(2, rows.row_index[r]);  // + distance term
    torch::Tensor probs = torch::softmax(scores, 2);
    torch::Tensor y;  // [H, 1, dh]
    int64_t offset = 0;
    for (const RingSpan& span : spans) {
      torch::Tensor p = probs.narrow(2, offset, span.length);
      torch::Tensor values = slice(span.compressed ? m.v_cmp : m.v_raw, span);
      y = y.defined() ? torch::baddbmm(y, p, values) : torch::bmm(p, values);
      offset += span.length;
    }
    outputs.push_back(y);
  }
  return outputs.size() == 1 ? outputs[0] : torch::cat(outputs, 1);  // [H, A, dh]
}

torch::Tensor RelativeAttentionImpl::DecodeAttendHost(const torch::Tensor& q,
                                                      const torch::Tensor& table, int layer,
                                                      DecodeRows& rows, const ActiveRows& active) {
  TORCH_CHECK(q.stride(2) == 1 && q.scalar_type() == torch::kFloat32, "host attention: bad query");
  TORCH_CHECK(u_bias_.is_contiguous() && v_bias_.is_contiguous() && table.is_contiguous(),
              "host attention: biases and position table must be contiguous");
  std::vector<HostAttentionRow> views;
  views.reserve(active.rows.size());
  for (size_t a = 0; a < active.rows.size(); ++a) {
    const int64_t r = active.rows[a];
    memory::LayerMemory& m = rows.memories[r]->layer(layer);
    TORCH_CHECK(m.k_raw.is_contiguous() && m.v_raw.is_contiguous(), "host attention: rings must be contiguous");
    HostAttentionRow view;
    view.query = q.data_ptr<float>() + static_cast<int64_t>(a) * q.stride(0);  // [A, H, dh]
    view.query_head_stride = q.stride(1);
    view.ring_type = HostRingType(m.k_raw);
    view.k_raw = m.k_raw.data_ptr();
    view.v_raw = m.v_raw.data_ptr();
    view.raw_capacity = m.k_raw.size(2);
    if (m.k_cmp.defined()) {
      TORCH_CHECK(m.k_cmp.is_contiguous() && m.v_cmp.is_contiguous(), "host attention: rings must be contiguous");
      view.k_cmp = m.k_cmp.data_ptr();
      view.v_cmp = m.v_cmp.data_ptr();
      view.cmp_capacity = m.k_cmp.size(2);
    }
    view.spans = rows.spans[r];
    view.distances = rows.distances[r];
    views.push_back(view);
  }
  HostAttentionShape shape;
  shape.heads = heads_;
  shape.d_head = d_head_;
  shape.table_rows = table.size(1);
  shape.scale = scale_;
  torch::Tensor y = torch::empty({static_cast<int64_t>(views.size()), heads_ * d_head_},
                                 q.options());  // [A, H * dh]
  HostAttention(u_bias_.data_ptr<float>(), v_bias_.data_ptr<float>(), table.data_ptr<float>(),
                shape, views, y.data_ptr<float>());
  return y;
}

torch::Tensor RelativeAttentionImpl::DecodeMixKnn(const torch::Tensor& q, const torch::Tensor& y,
                                                  int layer, DecodeRows& rows,
                                                  const ActiveRows& active) {
  const int64_t count = q.size(0);
  // Rows whose window holds no entry yet (sessions younger than mem_len) have nothing to find
  // and a zero gate: when that is every row, y passes unchanged without a search.
  std::vector<bool> searched(count, false);
  bool any = false;
  for (int64_t a = 0; a < count; ++a) {
    const memory::LayerMemory& m = rows.memories[active.rows[a]]->layer(layer);
    const memory::SegmentPlan& plan = rows.plans[active.rows[a]];
    searched[a] = m.knn_store != nullptr && AnyWindowHasEntries(*m.knn_store, plan.knn_lo, plan.knn_hi);
    any = any || searched[a];
  }
  if (!any) return y;
  if (rows.host) return DecodeMixKnnHost(q, y, layer, rows, active, searched);
  torch::Tensor qn = q / q.norm(2, -1, true).clamp_min(1e-6);            // [A, H, dh]
  torch::Tensor queries = qn.to(torch::kCPU, torch::kFloat32).contiguous();
  std::vector<torch::Tensor> keys, values, valid;  // each [H, k, dh] / [H, k]
  for (int64_t a = 0; a < count; ++a) {
    const int64_t r = active.rows[a];
    memory::LayerMemory& m = rows.memories[r]->layer(layer);
    if (!searched[a]) {
      // No kNN memory, or nothing in its window: no valid hit, so its gate is 0 and y passes
      // unchanged.
      keys.push_back(torch::zeros({heads_, knn_topk_, d_head_}));
      values.push_back(keys.back());
      valid.push_back(torch::zeros({heads_, knn_topk_}, torch::kBool));
      continue;
    }
    const memory::SegmentPlan& plan = rows.plans[r];
    absl::StatusOr<knn::KnnResult> found =
        m.knn_store->Search(queries[a].unsqueeze(1), knn_topk_, plan.knn_lo, plan.knn_hi);
    TORCH_CHECK(found.ok(), "kNN store: ", found.status().ToString());
    keys.push_back(found->keys.select(1, 0));
    values.push_back(found->values.select(1, 0));
    valid.push_back(found->valid.select(1, 0));
  }
  const torch::Device device = q.device();
  torch::Tensor hit_keys = torch::stack(keys, 0).to(device);      // [A, H, k, dh]
  torch::Tensor hit_values = torch::stack(values, 0).to(device);  // [A, H, k, dh]
  torch::Tensor hit_valid = torch::stack(valid, 0).to(device);    // [A, H, k]
  torch::Tensor logits = (qn.unsqueeze(2) * hit_keys).sum(-1) * knn_scale_.view({1, heads_, 1});
  torch::Tensor probs = torch::softmax(logits.masked_fill(hit_valid.logical_not(), -1e9), 2);
  torch::Tensor y_knn = (probs.unsqueeze(-1) * hit_values).sum(2);  // [A, H, dh]
  torch::Tensor gate = torch::sigmoid(knn_gate_).view({1, heads_, 1}) *
                       hit_valid.any(2, /*keepdim=*/true).to(y.scalar_type());
  return y + gate * (y_knn - y);
}

torch::Tensor RelativeAttentionImpl::DecodeMixKnnHost(const torch::Tensor& q,
                                                      const torch::Tensor& y, int layer,
                                                      DecodeRows& rows, const ActiveRows& active,
                                                      const std::vector<bool>& searched) {
  const int64_t count = q.size(0), heads = heads_, dh = d_head_, k = knn_topk_;
  torch::Tensor qc = q.contiguous(), out = y.contiguous().clone();  // [A, H, dh] each
  TORCH_CHECK(qc.scalar_type() == torch::kFloat32 && out.scalar_type() == torch::kFloat32 &&
                  knn_scale_.is_contiguous() && knn_gate_.is_contiguous(),
              "host kNN mix: bad operands");
  const float* scale = knn_scale_.data_ptr<float>();
  const float* gate_logit = knn_gate_.data_ptr<float>();
  std::vector<float> query(static_cast<size_t>(heads * dh)), weights(static_cast<size_t>(k)),
      mixed(static_cast<size_t>(dh));
  std::vector<knn::KnnMemory::Hit> hits;
  std::vector<std::pair<float, int64_t>> scratch;
  for (int64_t a = 0; a < count; ++a) {
    if (!searched[a]) continue;  // nothing in its window: gate 0, y passes unchanged
    const int64_t r = active.rows[a];
    const knn::KnnMemory& store = *rows.memories[r]->layer(layer).knn_store;
    const memory::SegmentPlan& plan = rows.plans[r];
    const float* qa = qc.data_ptr<float>() + a * heads * dh;
    for (int64_t h = 0; h < heads; ++h) {  // the L2-normalised query, as the store's keys are
      float norm = 0.0f;
      for (int64_t i = 0; i < dh; ++i) norm += qa[h * dh + i] * qa[h * dh + i];
      const float inverse = 1.0f / std::max(std::sqrt(norm), 1e-6f);
      for (int64_t i = 0; i < dh; ++i) query[h * dh + i] = qa[h * dh + i] * inverse;
    }
    // Hits from the rings directly, or (IVF mode) from Search's tensors, kept alive in `found`.
    absl::StatusOr<knn::KnnResult> found;
    if (store.mode() == knn::KnnMode::kExact) {
      absl::Status s = store.SearchOne(query.data(), static_cast<int>(k),
                                       plan.knn_lo.data_ptr<int64_t>()[0],
                                       plan.knn_hi.data_ptr<int64_t>()[0], hits, scratch);
      TORCH_CHECK(s.ok(), "kNN store: ", s.ToString());
    } else {
      found = store.Search(torch::from_blob(query.data(), {heads, 1, dh}), static_cast<int>(k),
                           plan.knn_lo, plan.knn_hi);
      TORCH_CHECK(found.ok(), "kNN store: ", found.status().ToString());
      hits.assign(static_cast<size_t>(heads * k), knn::KnnMemory::Hit{});
      const float* scores = found->scores.data_ptr<float>();        // [H, 1, k]
      const float* values = found->values.data_ptr<float>();        // [H, 1, k, dh]
      const bool* valid = found->valid.data_ptr<bool>();            // [H, 1, k]
      for (int64_t i = 0; i < heads * k; ++i) {
        if (valid[i]) hits[i] = knn::KnnMemory::Hit{scores[i], values + i * dh};
      }
    }
    float* ya = out.data_ptr<float>() + a * heads * dh;
    for (int64_t h = 0; h < heads; ++h) {
      const knn::KnnMemory::Hit* head_hits = hits.data() + h * k;
      // softmax(scale * score) over the valid hits, their values' weighted sum, then the gate.
      float best = -std::numeric_limits<float>::infinity();
      int64_t valid = 0;
      for (int64_t i = 0; i < k; ++i) {
        if (head_hits[i].value == nullptr) continue;
        best = std::max(best, head_hits[i].score * scale[h]);
        ++valid;
      }
      if (valid == 0) continue;  // gate 0
      float total = 0.0f;
      for (int64_t i = 0; i < k; ++i) {
        weights[i] = head_hits[i].value == nullptr ? 0.0f : std::exp(head_hits[i].score * scale[h] - best);
        total += weights[i];
      }
      const float gate = 1.0f / (1.0f + std::exp(-gate_logit[h]));
      float* yh = ya + h * dh;
      std::fill(mixed.begin(), mixed.end(), 0.0f);
      for (int64_t i = 0; i < k; ++i) {
        if (weights[i] == 0.0f) continue;
        const float w = weights[i] / total;
        const float* v = head_hits[i].value;
        for (int64_t e = 0; e < dh; ++e) mixed[e] += w * v[e];
      }
      for (int64_t e = 0; e < dh; ++e) yh[e] += gate * (mixed[e] - yh[e]);
    }
  }
  return out;
}

torch::Tensor RelativeAttentionImpl::Decode(const torch::Tensor& x, int layer, DecodeRows& rows,
                                            const ActiveRows& active,
                                            const torch::Tensor& sinusoid) {
  const int64_t batch = x.size(0), count = static_cast<int64_t>(active.rows.size());
  const int64_t width = heads_ * d_head_;
  torch::Tensor q, k, v;  // q [A, H, dh] for the active rows; k, v [B, H, dh] for every row
  if (!active.all && packed_qkv_.Accepts(x) && packed_qkv_.Current(qkv_->weight, qkv_->bias)) {
    // Exited rows only propagate state: keys and values for every row, queries for the rest.
    torch::Tensor kv = packed_qkv_.Apply(x, width, 2 * width).view({batch, 2, heads_, d_head_});
    k = kv.select(1, 0);
    v = kv.select(1, 1);
    if (count > 0) {
      q = packed_qkv_.Apply(x.index_select(0, active.index), 0, width)
              .view({count, heads_, d_head_});
    }
  } else {
    // [B, 3 * H * dh] -> 3 x [B, H, dh]
    torch::Tensor qkv = LinearForward(qkv_, packed_qkv_, x).view({batch, 3, heads_, d_head_});
    k = qkv.select(1, 1);
    v = qkv.select(1, 2);
    if (count > 0) q = active.all ? qkv.select(1, 0) : qkv.select(1, 0).index_select(0, active.index);
  }
  DecodeAppend(k, v, layer, rows);
  if (count == 0) return torch::zeros({0, x.size(1)}, x.options());

  torch::Tensor table = PositionTable(sinusoid);  // [H, D, dh]
  torch::Tensor y;                                // [A, H, dh]
  if (rows.host) {
    // The kernel forms the biased, scaled queries itself and writes [A, H * dh].
    y = DecodeAttendHost(q, table, layer, rows, active).view({count, heads_, d_head_});
  } else {
    torch::Tensor heads_first = q.transpose(0, 1);  // [H, A, dh]
    // The 1/sqrt(d) scale goes on the queries, so scores need no pass of their own.
    torch::Tensor qu = (heads_first + u_bias_.view({heads_, 1, d_head_})) * scale_;
    torch::Tensor qv = (heads_first + v_bias_.view({heads_, 1, d_head_})) * scale_;
    torch::Tensor bd = torch::bmm(qv, table.transpose(1, 2));  // scores by distance [H, A, D]
    y = DecodeAttendPerRow(qu, bd, layer, rows, active);
    y = y.transpose(0, 1);
  }
  if (knn_scale_.defined()) y = DecodeMixKnn(q, y, layer, rows, active);
  return LinearForward(out_, packed_out_, y.reshape({count, heads_ * d_head_}));  // [A, d_model]
}

}  // namespace mnemo::model
