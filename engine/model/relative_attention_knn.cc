// RelativeAttention's kNN layer (Memorizing Transformer, see relative_attention.h): appending
// the segment's entries, retrieving each query's top-k, and mixing them in. One reference mix
// (MixKnnHits, LibTorch ops) serves prefill segments, training and decode rows on any device;
// DecodeMixKnnHost is its fast path for decode rows on the CPU (plain loops, no op per row).
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "engine/knn/l2_normalise.h"
#include "engine/model/relative_attention.h"

namespace mnemo::model {

using knn::L2Normalise;

RelativeAttentionImpl::KnnHits RelativeAttentionImpl::RetrieveFromRing(
    const torch::Tensor& qn, const torch::Tensor& k, const torch::Tensor& v,
    memory::LayerWrite write) {
  const int64_t batch = qn.size(0), length = qn.size(2);
  const memory::LayerMemory& memory = write.memory();
  const memory::SegmentPlan& plan = write.plan();
  {
    torch::NoGradGuard no_grad;
    write.AppendKnn(L2Normalise(k, kKnnNormEpsilon), v);
  }
  // Slots fill in order (slot = position % capacity): until the ring wraps, only the first
  // `filled` can hold anything, so a young memory is searched at the cost of its size.
  const int64_t filled = std::min<int64_t>(memory.k_knn().size(2), plan.start + plan.length);
  torch::Tensor keys = memory.k_knn().narrow(2, 0, filled), values = memory.v_knn().narrow(2, 0, filled);
  const int64_t top = std::min<int64_t>(knn_topk_, filled);
  torch::Tensor index;
  KnnHits hits;
  {
    // Exact search: cosine similarity with every retrievable entry. [B, H, S, filled]
    torch::NoGradGuard no_grad;
    torch::Tensor sims = torch::matmul(qn.detach(), keys.transpose(2, 3))
                             .masked_fill_(plan.knn_mask.narrow(3, 0, filled).logical_not(),
                                           -std::numeric_limits<float>::infinity());
    auto best = sims.topk(top, 3);
    hits.valid = torch::isfinite(std::get<0>(best));  // [B, H, S, k]
    index = std::get<1>(best);
  }
  // [B, H, S * k, dh] gathers of the hits -> [B, H, S, k, dh]
  torch::Tensor flat = index.reshape({batch, heads_, length * top, 1}).expand({batch, heads_, length * top, d_head_});
  hits.keys = keys.gather(2, flat).view({batch, heads_, length, top, d_head_});
  hits.values = values.gather(2, flat).view({batch, heads_, length, top, d_head_});
  return hits;
}

bool AnyWindowHasEntries(const knn::KnnMemory& store, const torch::Tensor& lo,
                         const torch::Tensor& hi) {
  torch::Tensor l = lo.contiguous(), h = hi.contiguous();
  const int64_t* lo_p = l.data_ptr<int64_t>();
  const int64_t* hi_p = h.data_ptr<int64_t>();
  for (int64_t i = 0, n = l.numel(); i < n; ++i) {
    if (std::max(lo_p[i], store.oldest_position()) < std::min(hi_p[i], store.next_position())) {
      return true;
    }
  }
  return false;
}

RelativeAttentionImpl::KnnHits RelativeAttentionImpl::RetrieveFromStore(
    const torch::Tensor& qn, const torch::Tensor& k, const torch::Tensor& v,
    memory::LayerWrite write) {
  TORCH_CHECK(qn.size(0) == 1, "a kNN store serves batch 1, got ", qn.size(0));
  const knn::KnnMemory& store = *write.memory().knn_store();
  const memory::SegmentPlan& plan = write.plan();
  torch::NoGradGuard no_grad;
  write.AppendKnn(L2Normalise(k, kKnnNormEpsilon), v);
  if (!AnyWindowHasEntries(store, plan.knn_lo, plan.knn_hi)) return KnnHits{};  // nothing to find
  torch::Tensor queries = qn[0].to(torch::kCPU, torch::kFloat32).contiguous();  // [H, S, dh]
  absl::StatusOr<knn::KnnResult> found = store.Search(queries, knn_topk_, plan.knn_lo, plan.knn_hi);
  TORCH_CHECK(found.ok(), "kNN store: ", found.status().ToString());
  const torch::Device device = qn.device();
  return KnnHits{found->keys.unsqueeze(0).to(device), found->values.unsqueeze(0).to(device),
                 found->valid.unsqueeze(0).to(device)};
}

torch::Tensor RelativeAttentionImpl::MixKnn(const torch::Tensor& q, const torch::Tensor& k,
                                            const torch::Tensor& v, const torch::Tensor& y_local,
                                            memory::LayerWrite write) {
  torch::Tensor qn = L2Normalise(q, kKnnNormEpsilon);  // [B, H, S, dh]
  const KnnHits hits = write.memory().knn_store() != nullptr ? RetrieveFromStore(qn, k, v, write)
                                                             : RetrieveFromRing(qn, k, v, write);
  if (!hits.keys.defined()) return y_local;  // no query has an entry: every gate is 0
  return MixKnnHits(qn, hits.keys, hits.values, hits.valid, y_local);
}

torch::Tensor RelativeAttentionImpl::MixKnnHits(const torch::Tensor& qn, const torch::Tensor& keys,
                                                const torch::Tensor& values,
                                                const torch::Tensor& valid,
                                                const torch::Tensor& y_local) {
  // Per-head parameters broadcast as [1, H, 1...] over qn's other dimensions.
  std::vector<int64_t> per_head(qn.dim(), 1);
  per_head[1] = heads_;
  // Gradients reach the query, the scale and the gate; the hits are constants. [..., k]
  // (Broadcast multiplies, not batched products: ATen runs a batch of [k, dh] x [dh, 1]
  // products as one small GEMM call per query, no faster in training; training_speed.md.)
  torch::Tensor logits = (qn.unsqueeze(-2) * keys).sum(-1) * knn_scale_.view(per_head);
  // Finite fill: a query with no entries yet gets a harmless uniform softmax, then gate 0.
  torch::Tensor probs = torch::softmax(logits.masked_fill(valid.logical_not(), -1e9), -1);
  torch::Tensor y_knn = (probs.unsqueeze(-1) * values).sum(-2);  // qn's shape
  torch::Tensor gate = torch::sigmoid(knn_gate_).view(per_head) *
                       valid.any(-1, /*keepdim=*/true).to(y_local.scalar_type());
  return y_local + gate * (y_knn - y_local);
}

torch::Tensor RelativeAttentionImpl::DecodeMixKnn(const torch::Tensor& q, const torch::Tensor& y,
                                                  int layer, DecodeStepState& rows,
                                                  const ActiveRows& active) {
  const int64_t count = q.size(0);
  // Rows whose window holds no entry yet (sessions younger than mem_len) have nothing to find
  // and a zero gate: when that is every row, y passes unchanged without a search.
  std::vector<bool> searched(count, false);
  bool any = false;
  for (int64_t a = 0; a < count; ++a) {
    const memory::LayerMemory& m = rows.memory(active.rows[a], layer);
    const memory::SegmentPlan& plan = rows.plan(active.rows[a]);
    searched[a] = m.knn_store() != nullptr &&
                  AnyWindowHasEntries(*m.knn_store(), plan.knn_lo, plan.knn_hi);
    any = any || searched[a];
  }
  if (!any) return y;
  if (rows.host) return DecodeMixKnnHost(q, y, layer, rows, active, searched);
  torch::Tensor qn = knn::L2Normalise(q, kKnnNormEpsilon);  // [A, H, dh]
  torch::Tensor queries = qn.to(torch::kCPU, torch::kFloat32).contiguous();
  std::vector<torch::Tensor> keys, values, valid;  // each [H, k, dh] / [H, k]
  for (int64_t a = 0; a < count; ++a) {
    const int64_t r = active.rows[a];
    const memory::LayerMemory& m = rows.memory(r, layer);
    if (!searched[a]) {
      // No kNN memory, or nothing in its window: no valid hit, so its gate is 0 and y passes
      // unchanged.
      keys.push_back(torch::zeros({heads_, knn_topk_, d_head_}));
      values.push_back(keys.back());
      valid.push_back(torch::zeros({heads_, knn_topk_}, torch::kBool));
      continue;
    }
    const memory::SegmentPlan& plan = rows.plan(r);
    absl::StatusOr<knn::KnnResult> found =
        m.knn_store()->Search(queries[a].unsqueeze(1), knn_topk_, plan.knn_lo, plan.knn_hi);
    TORCH_CHECK(found.ok(), "kNN store: ", found.status().ToString());
    keys.push_back(found->keys.select(1, 0));
    values.push_back(found->values.select(1, 0));
    valid.push_back(found->valid.select(1, 0));
  }
  const torch::Device device = q.device();
  torch::Tensor hit_keys = torch::stack(keys, 0).to(device);      // [A, H, k, dh]
  torch::Tensor hit_values = torch::stack(values, 0).to(device);  // [A, H, k, dh]
  torch::Tensor hit_valid = torch::stack(valid, 0).to(device);    // [A, H, k]
  return MixKnnHits(qn, hit_keys, hit_values, hit_valid, y);
}

torch::Tensor RelativeAttentionImpl::DecodeMixKnnHost(const torch::Tensor& q,
                                                      const torch::Tensor& y, int layer,
                                                      DecodeStepState& rows,
                                                      const ActiveRows& active,
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
    const knn::KnnMemory& store = *rows.memory(r, layer).knn_store();
    const memory::SegmentPlan& plan = rows.plan(r);
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

}  // namespace mnemo::model
