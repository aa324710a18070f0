#include "engine/knn/knn_memory.h"

#include <ATen/Parallel.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/knn/ivf_head_index.h"
#include "engine/util/shape_string.h"
#include "engine/util/status_macros.h"

namespace mnemo::knn {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The IVF lists are swept free of evicted entries once per capacity / this many positions, so
// they hold at most ~6% stale entries.
constexpr int64_t kEvictSweepFraction = 16;

// Appends or searches of fewer entries/queries (all heads) than this run on the calling thread
// alone (see SerialIfSmall).
constexpr int64_t kSerialBelow = 32;

// Runs a decode-sized call single-threaded. A decode step is a dozen small products and scans;
// each one LibTorch or OpenBLAS splits across threads wakes a sleeping OpenMP worker
// (OMP_WAIT_POLICY=PASSIVE), which costs more than the split gains: on the 2-core machine a
// 4096 x 64 matrix-vector product takes 12 us on one thread and 68 us on two. OpenMP's thread
// count is per calling thread, so other threads are unaffected.
class SerialIfSmall {
 public:
  explicit SerialIfSmall(int64_t items)
      : saved_(items < kSerialBelow ? omp_get_max_threads() : 0) {
    if (saved_ > 1) omp_set_num_threads(1);
  }
  ~SerialIfSmall() {
    if (saved_ > 1) omp_set_num_threads(saved_);
  }
  SerialIfSmall(const SerialIfSmall&) = delete;
  SerialIfSmall& operator=(const SerialIfSmall&) = delete;

 private:
  int saved_;
};

// Scores per exact-search block: [H, rows, window] stays near 16 MB whatever the query count.
constexpr int64_t kExactBlockScores = int64_t{1} << 22;

// The rings' first allocation (or the capacity, if smaller): 2 MiB of keys and values for
// 4 heads of 64 dims, so short sessions do not grow them a dozen times.
constexpr int64_t kMinRingEntries = 1024;

absl::Status CheckFloatCpu(const torch::Tensor& t, const char* name) {
  if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(name, " is undefined"));
  if (t.scalar_type() != torch::kFloat32 || !t.device().is_cpu()) {
    return absl::InvalidArgumentError(absl::StrCat(name, " must be a float32 CPU tensor"));
  }
  return absl::OkStatus();
}


// Queries batched into one FAISS call: rows [begin, end) of the reordered queries, the union
// [lo, hi) of their windows and the candidates each needs (k + union minus own window).
struct QueryGroup {
  int64_t begin = 0, end = 0;
  int64_t lo = 0, hi = 0;
  int64_t min_length = 0;
  int64_t candidates = 0;
};

}  // namespace

int DefaultNlist(int64_t capacity, int64_t exact_threshold) {
  const double log2_lists =
      2.0 + 0.5 * std::log2(static_cast<double>(std::max<int64_t>(capacity, 1)));
  int exponent = std::clamp(static_cast<int>(std::lround(log2_lists)), 6, 12);
  while (exponent > 0 && (int64_t{16} << exponent) > exact_threshold) --exponent;
  return 1 << exponent;
}

const char* KnnModeName(KnnMode mode) { return mode == KnnMode::kExact ? "exact" : "ivf"; }

KnnMemory::KnnMemory(const KnnMemoryConfig& config)
    : config_(config), next_position_(config.first_position) {}

KnnMemory::~KnnMemory() = default;

absl::StatusOr<std::unique_ptr<KnnMemory>> KnnMemory::Create(const KnnMemoryConfig& config) {
  if (config.heads < 1 || config.dim < 1 || config.capacity < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("kNN memory needs heads, dim and capacity >= 1; got heads=", config.heads,
                     " dim=", config.dim, " capacity=", config.capacity));
  }
  if (config.first_position < 0 || config.exact_threshold < 0 || config.nlist < 0 ||
      config.nprobe < 1 || config.train_iterations < 1 || config.train_points_per_list < 1 ||
      config.group_spread < 0) {
    return absl::InvalidArgumentError(
        "kNN memory: first_position, exact_threshold, nlist, group_spread must be >= 0 and "
        "nprobe, train_iterations, train_points_per_list >= 1");
  }
  KnnMemoryConfig resolved = config;
  if (config.capacity > config.exact_threshold) {
    if (resolved.nlist == 0) resolved.nlist = DefaultNlist(config.capacity, config.exact_threshold);
    if (resolved.nlist > config.exact_threshold + 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "kNN memory: nlist ", resolved.nlist, " exceeds the ", config.exact_threshold + 1,
          " entries its quantizer is trained on (exact_threshold + 1)"));
    }
  }
  std::unique_ptr<KnnMemory> memory(new KnnMemory(resolved));
  // Empty rings: they grow with the entries (Reserve), so bytes() follows what is held.
  memory->keys_ = torch::empty({config.heads, 0, config.dim}, torch::kFloat32);
  memory->values_ = torch::empty({config.heads, 0, config.dim}, torch::kFloat32);
  if (config.preallocate) MNEMO_RETURN_IF_ERROR(memory->Reserve(config.capacity));
  memory->evict_sweep_ = std::max<int64_t>(1, config.capacity / kEvictSweepFraction);
  return memory;
}

int64_t KnnMemory::size() const {
  return std::min(next_position_ - config_.first_position, config_.capacity);
}

int KnnMemory::nlist() const { return ivf_.empty() ? 0 : ivf_[0]->nlist(); }

int64_t KnnMemory::bytes() const {
  int64_t total = keys_.numel() * keys_.element_size() + values_.numel() * values_.element_size();
  for (const auto& index : ivf_) total += index->bytes();
  return total;
}

absl::Status KnnMemory::Append(const torch::Tensor& keys, const torch::Tensor& values) {
  if (absl::Status s = CheckFloatCpu(keys, "keys"); !s.ok()) return s;
  if (absl::Status s = CheckFloatCpu(values, "values"); !s.ok()) return s;
  const int64_t h = config_.heads, d = config_.dim;
  if (keys.dim() != 3 || keys.size(1) != h || keys.size(2) != d ||
      !values.sizes().equals(keys.sizes())) {
    return absl::InvalidArgumentError(absl::StrCat("Append: keys and values must both be [n, ", h,
                                                   ", ", d, "]; got keys ", util::ShapeString(keys.sizes()),
                                                   ", values ", util::ShapeString(values.sizes())));
  }
  const int64_t n = keys.size(0);
  if (n == 0) return absl::OkStatus();
  if (absl::Status s = Reserve(next_position_ + n - config_.first_position); !s.ok()) return s;
  try {
    SerialIfSmall serial(n * config_.heads);
    // Only the last `capacity` positions of a long append survive it.
    const int64_t kept = std::min(n, capacity());
    const int64_t first = next_position_ + n - kept;
    torch::Tensor k_src = keys.narrow(0, n - kept, kept).transpose(0, 1);    // [H, kept, d]
    torch::Tensor v_src = values.narrow(0, n - kept, kept).transpose(0, 1);  // [H, kept, d]
    // The slots are one run, or two when the run wraps past the end of the ring.
    const int64_t slot = SlotOf(first), head_run = std::min(kept, capacity() - slot);
    keys_.narrow(1, slot, head_run).copy_(k_src.narrow(1, 0, head_run));
    values_.narrow(1, slot, head_run).copy_(v_src.narrow(1, 0, head_run));
    if (kept > head_run) {
      const int64_t rest = kept - head_run;
      keys_.narrow(1, 0, rest).copy_(k_src.narrow(1, head_run, rest));
      values_.narrow(1, 0, rest).copy_(v_src.narrow(1, head_run, rest));
    }
    next_position_ += n;
    return IndexAppended(first, kept);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("kNN memory Append failed: ", e.what()));
  }
}

absl::Status KnnMemory::AppendOne(const float* keys, const float* values) {
  if (absl::Status s = Reserve(next_position_ + 1 - config_.first_position); !s.ok()) return s;
  try {
    const int64_t h = config_.heads, d = config_.dim, slot = SlotOf(next_position_);
    const int64_t stride = keys_.size(1) * d;  // one head's ring, [allocated, d] contiguous
    float* key_ring = keys_.data_ptr<float>() + slot * d;
    float* value_ring = values_.data_ptr<float>() + slot * d;
    for (int64_t i = 0; i < h; ++i) {
      std::memcpy(key_ring + i * stride, keys + i * d, d * sizeof(float));
      std::memcpy(value_ring + i * stride, values + i * d, d * sizeof(float));
    }
    const int64_t first = next_position_++;
    return IndexAppended(first, 1);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("kNN memory Append failed: ", e.what()));
  }
}

absl::Status KnnMemory::IndexAppended(int64_t first, int64_t kept) {
  if (mode() == KnnMode::kIvf) {
    AddToIvf(first, kept);
    EvictFromIvf(kept);
  } else if (size() > config_.exact_threshold) {
    return BuildIvf();
  }
  return absl::OkStatus();
}

absl::Status KnnMemory::Reserve(int64_t appended) {
  const int64_t held = allocated();
  const int64_t needed = std::min(appended, capacity());
  if (needed <= held) return absl::OkStatus();
  // Geometric growth: sizes kMinRingEntries * 2^j (then the capacity), so an entry is copied
  // at most about once on average whatever the history, and the rings hold < 2x the entries.
  int64_t grown = kMinRingEntries;
  while (grown < needed) grown *= 2;
  grown = std::min(grown, capacity());
  try {
    torch::Tensor keys = torch::empty({config_.heads, grown, config_.dim}, torch::kFloat32);
    torch::Tensor values = torch::empty({config_.heads, grown, config_.dim}, torch::kFloat32);
    // Not yet full, so nothing has wrapped: slot = position - first_position in the old rings
    // and in the new ones alike (SlotOf is modulo capacity, which no slot has reached).
    keys.narrow(1, 0, held).copy_(keys_);
    values.narrow(1, 0, held).copy_(values_);
    keys_ = std::move(keys);
    values_ = std::move(values);
  } catch (const std::exception& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("kNN memory: cannot grow rings to ", grown, " x ", config_.heads, " x ",
                     config_.dim, " (capacity ", capacity(), "): ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status KnnMemory::BuildIvf() {
  IvfOptions options;
  options.nlist = config_.nlist;
  options.nprobe = config_.nprobe;
  options.train_iterations = config_.train_iterations;
  options.train_points_per_list = config_.train_points_per_list;
  std::vector<std::unique_ptr<IvfHeadIndex>> built;
  for (int h = 0; h < config_.heads; ++h) {
    options.seed = config_.seed + h;
    // Slots [0, size) are exactly the entries present, in some rotation: fine for k-means.
    absl::StatusOr<std::unique_ptr<IvfHeadIndex>> index =
        IvfHeadIndex::Train(keys_[h].narrow(0, 0, size()), options);
    if (!index.ok()) return index.status();
    built.push_back(std::move(index).value());
  }
  ivf_ = std::move(built);
  AddToIvf(oldest_position(), size());
  return absl::OkStatus();
}

void KnnMemory::EvictFromIvf(int64_t appended) {
  // Entries below oldest_position() are never returned (each search selects its window, and the
  // sorted-range selector skips a list's stale prefix by binary search), so they only cost
  // memory. Trimming them moves a list's remaining entries; doing a few lists per append, a full
  // sweep every evict_sweep_ positions, spreads that cost evenly instead of moving the whole
  // index at once (~1 GB at 1M entries, 4 heads).
  const int nlist = ivf_[0]->nlist();
  evict_credit_ += appended * nlist;
  const int64_t lists = std::min<int64_t>(evict_credit_ / evict_sweep_, nlist);
  evict_credit_ %= evict_sweep_;
  if (lists == 0) return;
  for (auto& index : ivf_) {
    index->EvictBelow(oldest_position(), evict_cursor_, static_cast<int>(lists));
  }
  evict_cursor_ = static_cast<int>((evict_cursor_ + lists) % nlist);
}

void KnnMemory::AddToIvf(int64_t first, int64_t count) {
  const int64_t slot = SlotOf(first), head_run = std::min(count, capacity() - slot);
  for (int h = 0; h < config_.heads; ++h) {
    torch::Tensor ring = keys_[h];  // [capacity, d], contiguous
    // In position order, so every list keeps ascending ids.
    ivf_[h]->Add(ring.narrow(0, slot, head_run), first);
    if (count > head_run) ivf_[h]->Add(ring.narrow(0, 0, count - head_run), first + head_run);
  }
}

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

// a . b over n floats, sixteen partial sums.
__attribute__((target_clones("avx512f", "avx2", "default"))) float Dot(const float* a,
                                                                       const float* b, int64_t n) {
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

std::unique_ptr<KnnMemory> KnnMemory::Clone() const {
  std::unique_ptr<KnnMemory> copy(new KnnMemory(config_));
  copy->keys_ = keys_.clone();
  copy->values_ = values_.clone();
  copy->next_position_ = next_position_;
  copy->evict_sweep_ = evict_sweep_;
  copy->evict_credit_ = evict_credit_;
  copy->evict_cursor_ = evict_cursor_;
  for (const auto& index : ivf_) copy->ivf_.push_back(index->Clone());
  return copy;
}

}  // namespace mnemo::knn
