// RelativeAttention's batched decode path (see RelativeAttention::Decode). The same function as
// forward() for a one-position segment, row by row: the weight matmuls run once for all rows;
// memory appends (each row through its own SegmentWrite), compression inputs, kNN searches
// (relative_attention_knn.cc) and attention are per row because each row owns its memory.
// Attention is the reference (Attend, relative_attention.cc) row by row, or its fast path, the
// host kernel (host_attention.h), over every row's rings in place.
#include <vector>

#include "engine/knn/l2_normalise.h"
#include "engine/model/host_attention.h"
#include "engine/model/relative_attention.h"

namespace mnemo::model {

void RelativeAttentionImpl::DecodeAppend(const torch::Tensor& k, const torch::Tensor& v,
                                         int layer, DecodeStepState& rows) {
  const int64_t batch = k.size(0);
  std::vector<torch::Tensor> k_groups, v_groups;  // each [1, H, rate, dh]
  std::vector<int64_t> group_rows;
  // Host rows: [H, dh] float32 rows of k and v, written without an op (WriteRawPosition).
  TORCH_CHECK(!rows.host || (k.stride(2) == 1 && v.stride(2) == 1 && k.stride(1) == v.stride(1) &&
                             k.scalar_type() == torch::kFloat32 &&
                             v.scalar_type() == torch::kFloat32),
              "host ring write needs float32 rows of dh contiguous");
  for (int64_t r = 0; r < batch; ++r) {
    memory::LayerWrite write = rows.writes[r].layer(layer);
    const memory::LayerMemory& m = write.memory();
    const memory::SegmentPlan& plan = write.plan();
    if (rows.host) {
      write.WriteRawPosition(k.data_ptr<float>() + r * k.stride(0),
                             v.data_ptr<float>() + r * v.stride(0), k.stride(1), &FloatsToHalves);
    } else {
      write.WriteRaw(k.narrow(0, r, 1).unsqueeze(2), v.narrow(0, r, 1).unsqueeze(2));
    }
    if (m.k_cmp().defined() && plan.new_groups > 0) {
      k_groups.push_back(m.k_raw().index_select(2, plan.group_source_slots).to(torch::kFloat32));
      v_groups.push_back(m.v_raw().index_select(2, plan.group_source_slots).to(torch::kFloat32));
      group_rows.push_back(r);
    }
  }
  if (!group_rows.empty()) {
    // Every row completing a group compresses in one call: [G, H, rate, dh] -> [G, H, 1, dh].
    torch::Tensor ck = Compress(torch::cat(k_groups, 0), /*keys=*/true);
    torch::Tensor cv = Compress(torch::cat(v_groups, 0), /*keys=*/false);
    for (size_t g = 0; g < group_rows.size(); ++g) {
      rows.writes[group_rows[g]].layer(layer).WriteCompressed(ck.narrow(0, g, 1),
                                                              cv.narrow(0, g, 1));
    }
  }
  if (knn_scale_.defined()) {
    // [B, H, dh] float32 CPU contiguous: row r's [H, dh] keys and values for
    // knn::KnnMemory::AppendOne (the keys L2-normalised per head, as Forward stores them).
    torch::Tensor kn =
        knn::L2Normalise(k, kKnnNormEpsilon).to(torch::kCPU, torch::kFloat32).contiguous();
    torch::Tensor vc = v.to(torch::kCPU, torch::kFloat32).contiguous();
    const int64_t row_size = kn.size(1) * kn.size(2);
    for (int64_t r = 0; r < batch; ++r) {
      memory::LayerWrite write = rows.writes[r].layer(layer);
      if (write.memory().knn_store() == nullptr) continue;
      write.AppendKnnPosition(kn.data_ptr<float>() + r * row_size,
                              vc.data_ptr<float>() + r * row_size);
    }
  }
}

torch::Tensor RelativeAttentionImpl::DecodeAttendReference(const torch::Tensor& q,
                                                           const torch::Tensor& sinusoid,
                                                           int layer, DecodeStepState& rows,
                                                           const ActiveRows& active) {
  std::vector<torch::Tensor> outputs;  // each [1, H, 1, dh]
  outputs.reserve(active.rows.size());
  for (size_t a = 0; a < active.rows.size(); ++a) {
    const int64_t r = active.rows[a];
    // Row r's query as a one-position segment [1, H, 1, dh] over its own rings and plan.
    outputs.push_back(Attend(q.narrow(0, static_cast<int64_t>(a), 1).unsqueeze(2),
                             rows.memory(r, layer), rows.plan(r), sinusoid));
  }
  torch::Tensor y = outputs.size() == 1 ? outputs[0] : torch::cat(outputs, 0);
  return y.squeeze(2);  // [A, H, dh]
}

torch::Tensor RelativeAttentionImpl::DecodeAttendHost(const torch::Tensor& q,
                                                      const torch::Tensor& table, int layer,
                                                      DecodeStepState& rows,
                                                      const ActiveRows& active) {
  TORCH_CHECK(q.stride(2) == 1 && q.scalar_type() == torch::kFloat32, "host attention: bad query");
  TORCH_CHECK(u_bias_.is_contiguous() && v_bias_.is_contiguous() && table.is_contiguous(),
              "host attention: biases and position table must be contiguous");
  std::vector<HostAttentionRow> views;
  views.reserve(active.rows.size());
  for (size_t a = 0; a < active.rows.size(); ++a) {
    const int64_t r = active.rows[a];
    const memory::LayerMemory& m = rows.memory(r, layer);
    TORCH_CHECK(m.k_raw().is_contiguous() && m.v_raw().is_contiguous(), "host attention: rings must be contiguous");
    HostAttentionRow view;
    view.query = q.data_ptr<float>() + static_cast<int64_t>(a) * q.stride(0);  // [A, H, dh]
    view.query_head_stride = q.stride(1);
    view.ring_type = HostRingType(m.k_raw());
    view.k_raw = m.k_raw().data_ptr();
    view.v_raw = m.v_raw().data_ptr();
    view.raw_capacity = m.k_raw().size(2);
    if (m.k_cmp().defined()) {
      TORCH_CHECK(m.k_cmp().is_contiguous() && m.v_cmp().is_contiguous(), "host attention: rings must be contiguous");
      view.k_cmp = m.k_cmp().data_ptr();
      view.v_cmp = m.v_cmp().data_ptr();
      view.cmp_capacity = m.k_cmp().size(2);
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

torch::Tensor RelativeAttentionImpl::Decode(const torch::Tensor& x, int layer,
                                            DecodeStepState& rows,
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

  torch::Tensor y;  // [A, H, dh]
  if (rows.host) {
    // The kernel forms the biased, scaled queries itself and writes [A, H * dh].
    y = DecodeAttendHost(q, PositionTable(sinusoid), layer, rows, active)
            .view({count, heads_, d_head_});
  } else {
    y = DecodeAttendReference(q, sinusoid, layer, rows, active);
  }
  if (knn_scale_.defined()) y = DecodeMixKnn(q, y, layer, rows, active);
  return LinearForward(out_, packed_out_, y.reshape({count, heads_ * d_head_}));  // [A, d_model]
}

}  // namespace mnemo::model
