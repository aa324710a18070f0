// KnnMemory's searches (knn_memory.h): exact top-k over a window of positions, one query on the
// host (SearchOne), and FAISS IVF with the queries grouped by window.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/knn/ivf_head_index.h"
#include "engine/knn/knn_memory.h"
#include "engine/knn/knn_memory_internal.h"
#include "engine/util/shape_string.h"
#include "engine/util/status_macros.h"

namespace mnemo::knn {
namespace {

using internal::CheckFloatCpu;
using internal::SerialIfSmall;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Scores per exact-search block: [H, rows, window] stays near 16 MB whatever the query count.
constexpr int64_t kExactBlockScores = int64_t{1} << 22;

// Queries batched into one FAISS call: rows [begin, end) of the reordered queries, the union
// [lo, hi) of their windows and the candidates each needs (k + union minus own window).
struct QueryGroup {
  int64_t begin = 0, end = 0;
  int64_t lo = 0, hi = 0;
  int64_t min_length = 0;
  int64_t candidates = 0;
};

}  // namespace

absl::Status KnnMemory::CheckWindow(int64_t lo, int64_t hi) const {
  if (lo > hi) {
    return absl::InvalidArgumentError(absl::StrCat("window lo ", lo, " > hi ", hi));
  }
  if (lo < hi && std::max(lo, config_.first_position) < oldest_position()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "window [", lo, ", ", hi, ") reaches evicted positions (retained: [", oldest_position(),
        ", ", next_position_, ")); the memory's capacity ", capacity(),
        " is too small for the caller's windows"));
  }
  return absl::OkStatus();
}

absl::StatusOr<KnnResult> KnnMemory::Search(const torch::Tensor& queries, int k,
                                            const torch::Tensor& lo,
                                            const torch::Tensor& hi) const {
  if (absl::Status s = CheckFloatCpu(queries, "queries"); !s.ok()) return s;
  const int64_t h = config_.heads, d = config_.dim;
  if (queries.dim() != 3 || queries.size(0) != h || queries.size(2) != d) {
    return absl::InvalidArgumentError(absl::StrCat("Search: queries must be [", h, ", Q, ", d,
                                                   "]; got ", util::ShapeString(queries.sizes())));
  }
  const int64_t q = queries.size(1);
  if (k < 1 || k > capacity()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Search: k must be in [1, capacity = ", capacity(), "]; got ", k));
  }
  for (const auto& [t, name] : {std::pair{&lo, "lo"}, std::pair{&hi, "hi"}}) {
    if (!t->defined() || t->scalar_type() != torch::kInt64 || !t->device().is_cpu() ||
        t->dim() != 1 || t->size(0) != q) {
      return absl::InvalidArgumentError(absl::StrCat("Search: ", name, " must be a [", q,
                                                     "] int64 CPU tensor"));
    }
  }
  torch::Tensor lo_c = lo.contiguous(), hi_c = hi.contiguous();
  const int64_t* lo_p = lo_c.data_ptr<int64_t>();
  const int64_t* hi_p = hi_c.data_ptr<int64_t>();
  for (int64_t i = 0; i < q; ++i) {
    if (absl::Status s = CheckWindow(lo_p[i], hi_p[i]); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("Search: query ", i, ": ", s.message()));
    }
  }
  try {
    SerialIfSmall serial(q * h);
    torch::Tensor qc = queries.contiguous();
    torch::Tensor positions = mode() == KnnMode::kExact ? SearchExact(qc, k, lo_c, hi_c)
                                                        : SearchIvf(qc, k, lo_c, hi_c);
    return Finish(qc, std::move(positions));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("kNN memory Search failed: ", e.what()));
  }
}

torch::Tensor KnnMemory::SearchExact(const torch::Tensor& queries, int k, const torch::Tensor& lo,
                                     const torch::Tensor& hi) const {
  const int64_t h = config_.heads, q = queries.size(1);
  torch::Tensor out = torch::full({h, q, k}, -1, torch::kInt64);
  const int64_t* lo_p = lo.data_ptr<int64_t>();
  const int64_t* hi_p = hi.data_ptr<int64_t>();
  // Blocks of queries; each scans only the slots of its union window, so the cost follows the
  // window (and a block's score matrix stays near 16 MB).
  for (int64_t start = 0; start < q;) {
    int64_t ulo = std::numeric_limits<int64_t>::max(), uhi = std::numeric_limits<int64_t>::min();
    int64_t rows = 0;
    bool same_window = true;
    for (; start + rows < q; ++rows) {
      const int64_t i = start + rows;
      const int64_t nlo = std::min(ulo, std::max(lo_p[i], oldest_position()));
      const int64_t nhi = std::max(uhi, std::min(hi_p[i], next_position_));
      if (rows > 0 && h * (rows + 1) * std::max<int64_t>(nhi - nlo, 1) > kExactBlockScores) break;
      if (rows > 0 && (lo_p[i] != lo_p[start] || hi_p[i] != hi_p[start])) same_window = false;
      ulo = nlo, uhi = nhi;
    }
    const int64_t length = uhi - ulo;
    if (length > 0) {
      // The union window's slots: one run, or two when it wraps past the end of the ring.
      const int64_t slot = SlotOf(ulo), first_run = std::min(length, capacity() - slot);
      torch::Tensor block = queries.narrow(1, start, rows);  // [H, rows, d]
      std::vector<torch::Tensor> per_head;
      for (int64_t head = 0; head < h; ++head) {
        std::vector<torch::Tensor> runs = {keys_[head].narrow(0, slot, first_run)};
        if (length > first_run) runs.push_back(keys_[head].narrow(0, 0, length - first_run));
        std::vector<torch::Tensor> scores;  // [rows, run] each
        for (const torch::Tensor& run : runs) {
          // One query: a matrix-vector product, ~3x faster in OpenBLAS than a 1-column GEMM.
          scores.push_back(rows == 1 ? torch::mv(run, block[head][0]).unsqueeze(0)
                                     : torch::mm(block[head], run.t()));
        }
        per_head.push_back(scores.size() == 1 ? scores[0] : torch::cat(scores, 1));
      }
      torch::Tensor scores = torch::stack(per_head);  // [H, rows, length], column j = ulo + j
      if (!same_window) {
        torch::Tensor position = torch::arange(ulo, uhi, torch::kInt64);
        torch::Tensor inside = position.unsqueeze(0).ge(lo.narrow(0, start, rows).unsqueeze(1)) &
                               position.unsqueeze(0).lt(hi.narrow(0, start, rows).unsqueeze(1));
        scores.masked_fill_(inside.logical_not().unsqueeze(0), kNegInf);
      }
      const int64_t top = std::min<int64_t>(k, length);
      auto best = scores.topk(top, 2);  // [H, rows, top]
      torch::Tensor found = (std::get<1>(best) + ulo).masked_fill_(std::get<0>(best).eq(kNegInf), -1);
      out.narrow(1, start, rows).narrow(2, 0, top).copy_(found);
    }
    start += rows;
  }
  return out;
}

namespace {

// Sanitizer builds (scripts/sanitize.sh) compile one version: GCC instruments the clones'
// ifunc resolver, which the dynamic loader runs before the sanitizer runtime is up (a crash at
// start-up).
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define MNEMO_DOT_CLONES
#else
#define MNEMO_DOT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

// a . b over n floats, sixteen partial sums.
MNEMO_DOT_CLONES float Dot(const float* a, const float* b, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
#pragma GCC unroll 16
    for (int l = 0; l < 16; ++l) acc[l] += a[i + l] * b[i + l];
  }
  float total = 0.0f;
  for (; i < n; ++i) total += a[i] * b[i];
#pragma GCC unroll 16
  for (int l = 0; l < 16; ++l) total += acc[l];
  return total;
}

}  // namespace

absl::Status KnnMemory::SearchOne(const float* query, int k, int64_t lo, int64_t hi,
                                  std::vector<Hit>& hits,
                                  std::vector<std::pair<float, int64_t>>& scratch) const {
  if (mode() != KnnMode::kExact) {
    return absl::FailedPreconditionError("SearchOne: the memory is in IVF mode; use Search");
  }
  if (k < 1 || k > capacity()) {
    return absl::InvalidArgumentError(
        absl::StrCat("SearchOne: k must be in [1, capacity = ", capacity(), "]; got ", k));
  }
  if (absl::Status s = CheckWindow(lo, hi); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("SearchOne: ", s.message()));
  }
  const int64_t h = config_.heads, d = config_.dim;
  hits.assign(static_cast<size_t>(h * k), Hit{});
  const int64_t first = std::max(lo, oldest_position()), last = std::min(hi, next_position_);
  if (first >= last) return absl::OkStatus();
  const int64_t length = last - first, held = allocated();
  const int64_t top = std::min<int64_t>(k, length);
  const float* keys = keys_.data_ptr<float>();
  const float* values = values_.data_ptr<float>();
  scratch.resize(static_cast<size_t>(length));
  for (int64_t head = 0; head < h; ++head) {
    const float* q = query + head * d;
    const float* head_keys = keys + head * held * d;
    for (int64_t j = 0, slot = SlotOf(first); j < length; ++j, ++slot) {
      if (slot == capacity()) slot = 0;  // the window wraps past the ring's end
      scratch[j] = {Dot(q, head_keys + slot * d, d), j};
    }
    // Best first; equal scores keep position order.
    std::partial_sort(scratch.begin(), scratch.begin() + top, scratch.end(),
                      [](const std::pair<float, int64_t>& a, const std::pair<float, int64_t>& b) {
                        return a.first > b.first || (a.first == b.first && a.second < b.second);
                      });
    for (int64_t i = 0; i < top; ++i) {
      const int64_t slot = SlotOf(first + scratch[i].second);
      hits[head * k + i] = Hit{scratch[i].first, values + (head * held + slot) * d};
    }
  }
  return absl::OkStatus();
}

torch::Tensor KnnMemory::SearchIvf(const torch::Tensor& queries, int k, const torch::Tensor& lo,
                                   const torch::Tensor& hi) const {
  const int64_t h = config_.heads, q = queries.size(1), d = config_.dim;
  torch::Tensor out = torch::full({h, q, k}, -1, torch::kInt64);
  const int64_t* lo_p = lo.data_ptr<int64_t>();
  const int64_t* hi_p = hi.data_ptr<int64_t>();
  auto clamp_lo = [&](int64_t i) { return std::max(lo_p[i], oldest_position()); };
  auto clamp_hi = [&](int64_t i) { return std::min(hi_p[i], next_position_); };

  // Group queries (in order, skipping empty windows) while every member's window covers all but
  // `spread` positions of the group's union: then k + spread candidates from the union contain
  // each member's top k among the probed lists.
  const int64_t spread = config_.group_spread > 0 ? config_.group_spread : k;
  std::vector<int64_t> order;
  std::vector<QueryGroup> groups;
  for (int64_t i = 0; i < q; ++i) {
    const int64_t a = clamp_lo(i), b = clamp_hi(i);
    if (a >= b) continue;
    if (!groups.empty()) {
      QueryGroup& g = groups.back();
      const int64_t ulo = std::min(g.lo, a), uhi = std::max(g.hi, b);
      const int64_t shortest = std::min(g.min_length, b - a);
      if ((uhi - ulo) - shortest <= spread) {
        g.lo = ulo, g.hi = uhi, g.min_length = shortest, g.end += 1;
        order.push_back(i);
        continue;
      }
    }
    const int64_t row = static_cast<int64_t>(order.size());
    groups.push_back({row, row + 1, a, b, b - a, 0});
    order.push_back(i);
  }
  if (groups.empty()) return out;
  std::vector<int64_t> offsets;  // into the per-head candidate buffers
  int64_t total = 0;
  for (QueryGroup& g : groups) {
    g.candidates = std::min<int64_t>(k + (g.hi - g.lo) - g.min_length, g.hi - g.lo);
    offsets.push_back(total);
    total += (g.end - g.begin) * g.candidates;
  }

  const int64_t rows = static_cast<int64_t>(order.size());
  torch::Tensor picked = queries.index_select(
      1, torch::from_blob(order.data(), {rows}, torch::kInt64));  // [H, rows, d]
  std::vector<torch::Tensor> lists(h), centroid_scores(h);        // [rows, nprobe] each
  for (int64_t head = 0; head < h; ++head) {
    std::tie(lists[head], centroid_scores[head]) = ivf_[head]->Assign(picked[head], config_.nprobe);
  }
  const int nprobe = static_cast<int>(lists[0].size(1));
  std::vector<std::vector<float>> cand_scores(h, std::vector<float>(total));
  std::vector<std::vector<int64_t>> cand_ids(h, std::vector<int64_t>(total));
  const int64_t num_groups = static_cast<int64_t>(groups.size());
  auto run = [&](int64_t task) {
    const int64_t head = task / num_groups;
    const QueryGroup& g = groups[task % num_groups];
    const int64_t off = offsets[task % num_groups];
    ivf_[head]->Search(g.end - g.begin, picked[head].data_ptr<float>() + g.begin * d,
                       g.candidates, lists[head].data_ptr<int64_t>() + g.begin * nprobe,
                       centroid_scores[head].data_ptr<float>() + g.begin * nprobe, nprobe, g.lo,
                       g.hi, cand_scores[head].data() + off, cand_ids[head].data() + off);
  };
  // FAISS splits one call's queries across threads itself; with several calls, run them side by
  // side instead (a decode step is serial: see SerialIfSmall).
  const int64_t tasks = h * num_groups;
  if (tasks > 1 && at::get_num_threads() > 1) {
    at::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) run(t);
    });
  } else {
    for (int64_t t = 0; t < tasks; ++t) run(t);
  }

  auto found = out.accessor<int64_t, 3>();
  for (int64_t head = 0; head < h; ++head) {
    for (int64_t gi = 0; gi < num_groups; ++gi) {
      const QueryGroup& g = groups[gi];
      for (int64_t r = g.begin; r < g.end; ++r) {
        const int64_t i = order[r];
        const int64_t a = clamp_lo(i), b = clamp_hi(i);
        const int64_t* ids = cand_ids[head].data() + offsets[gi] + (r - g.begin) * g.candidates;
        int64_t taken = 0;
        for (int64_t j = 0; j < g.candidates && taken < k; ++j) {
          if (ids[j] >= a && ids[j] < b) found[head][i][taken++] = ids[j];
        }
      }
    }
  }
  return out;
}

KnnResult KnnMemory::Finish(const torch::Tensor& queries, torch::Tensor positions) const {
  const int64_t h = config_.heads, q = positions.size(1), k = positions.size(2), d = config_.dim;
  KnnResult r;
  r.valid = positions.ge(0);  // [H, Q, k]
  if (allocated() == 0) {  // nothing appended yet: nothing to gather, every hit invalid
    r.keys = torch::zeros({h, q, k, d}, torch::kFloat32);
    r.values = torch::zeros({h, q, k, d}, torch::kFloat32);
    r.scores = torch::zeros({h, q, k}, torch::kFloat32);
    r.positions = std::move(positions);
    return r;
  }
  torch::Tensor slots = torch::where(r.valid, (positions - config_.first_position) % capacity(),
                                     torch::zeros_like(positions));
  torch::Tensor gather = slots.reshape({h, q * k, 1}).expand({h, q * k, d});
  torch::Tensor hidden = r.valid.logical_not().unsqueeze(-1);  // [H, Q, k, 1]
  r.keys = keys_.gather(1, gather).view({h, q, k, d}).masked_fill_(hidden, 0.0f);
  r.values = values_.gather(1, gather).view({h, q, k, d}).masked_fill_(hidden, 0.0f);
  // Exact inner products from the stored keys, whichever mode found the hits.
  r.scores = (queries.unsqueeze(2) * r.keys).sum(-1);  // [H, Q, k], 0 where invalid
  torch::Tensor order = std::get<1>(
      r.scores.masked_fill(r.valid.logical_not(), kNegInf).sort(/*stable=*/true, 2, true));
  torch::Tensor order_d = order.unsqueeze(-1).expand({h, q, k, d});
  r.keys = r.keys.gather(2, order_d);
  r.values = r.values.gather(2, order_d);
  r.scores = r.scores.gather(2, order);
  r.valid = r.valid.gather(2, order);
  r.positions = positions.gather(2, order);
  return r;
}

}  // namespace mnemo::knn
