// KnnMemory: one session's kNN memory for one kNN layer (Memorizing Transformer, docs/design.md
// §2-3): per head, the (key, value) pairs of the last `capacity` positions, searchable by inner
// product with a per-query position window.
//
// Owns: key and value rings (the source of truth for every result) and, once the memory has grown
// past `exact_threshold` entries, one FAISS IVF index per head (a copy of the keys, used only to
// find candidates). Not thread-safe: one owner (the engine's loop thread) calls it; Search may use
// LibTorch's intra-op threads internally.
//
// Search modes:
//  - exact (size <= exact_threshold): one matrix product over the ring, masked to each query's
//    window, top-k. Identical to brute force.
//  - IVF (from the first Append that takes size past the threshold, for good): the coarse
//    quantizer of each head is trained once, on the entries present then, and every entry present
//    is added; later appends are added as they come. A search asks FAISS for k + slack candidates
//    per query (slack = entries inside the batch's union window but outside the query's own), keeps
//    those inside the query's window and re-scores them exactly from the ring. Results are the
//    exact top-k of the entries in the probed lists; recall depends on nprobe (see the tests).
//
// Positions and windows: entries are appended in position order, one per head per position,
// starting at `first_position`. The memory retains positions [next_position - size, next_position)
// (FIFO, oldest first; never reset). A query window [lo, hi) may extend past either end of what was
// ever appended, but must not reach a position that was appended and then evicted: that means the
// capacity is too small for the caller's windows, and Search returns INVALID_ARGUMENT. A model with
// kNN window [t - mem_len - knn_len, t - mem_len) for query t that appends a segment of up to
// seg_len positions before searching needs capacity >= knn_len + mem_len + seg_len.
//
// Memory: rings are float32 [heads, allocated, d] for keys and for values. They start empty and
// grow with the entries, geometrically (x2, at least 1024 entries, at most capacity), so bytes()
// follows what the session holds: a fresh 64K-capacity session costs nothing, a 1K-token one
// ~2 MiB (4 heads, d = 64). Until the ring first fills nothing wraps, so growth copies the held
// entries once into a larger ring (amortised O(1) per append, never a copy per append); once
// allocated == capacity the rings never move again and FIFO eviction overwrites slots in place.
// At 1M entries, 4 heads, d = 64: keys 1 GiB + values 1 GiB + the IVF copy of the keys ~1 GiB
// (+ 8 B/entry ids) ~= 3.1 GiB per session per kNN layer.
#ifndef MNEMO_ENGINE_KNN_KNN_MEMORY_H_
#define MNEMO_ENGINE_KNN_KNN_MEMORY_H_

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/util/binary_io.h"

namespace mnemo::knn {

class IvfHeadIndex;

struct KnnMemoryConfig {
  int heads = 1;
  int dim = 64;                     // d_head
  int64_t capacity = 65536;         // entries (positions) per head kept, FIFO
  int64_t first_position = 0;       // position of the first entry appended
  int64_t exact_threshold = 65536;  // above this many entries per head, search goes through IVF
  // IVF lists per head; 0 = DefaultNlist(capacity, exact_threshold). At most exact_threshold + 1
  // (the quantizer is trained on the entries present when the threshold is crossed).
  int nlist = 0;
  // Lists scanned per query. With the default nlist a query scans ~2 sqrt(capacity) entries per
  // head (2K at 1M); recall and cost by nprobe are in docs/results/knn_memory.md.
  int nprobe = 8;
  // k-means iterations at the threshold crossing. Each costs sample * nlist * d per head (65K x
  // 4096 x 64 = 17 GMAC); 4 keep most of 10's recall (docs/results/knn_memory.md).
  int train_iterations = 4;
  int train_points_per_list = 39;   // k-means sample cap: nlist * this many entries
  // Queries go to FAISS in groups whose windows differ by at most this many positions (the
  // candidate slack per query); 0 = k. Larger groups: fewer calls, more candidates each.
  int64_t group_spread = 0;
  uint64_t seed = 1234;             // k-means sampling and initialisation
  // Allocate the rings at full capacity in Create instead of growing them with the entries
  // (results are the same either way; a caller that must fail early rather than mid-session).
  bool preallocate = false;
};

// nlist for a memory of `capacity` entries: the power of two nearest 4 * sqrt(capacity) (the
// low end of FAISS's 4..16 sqrt(N) guideline), within [64, 4096], and at most
// exact_threshold / 16 so that k-means has >= 16 points per list (1M entries, threshold 64K ->
// 4096 lists of ~256 entries). Many small lists probed more often beat few large ones at the same
// scan cost (docs/results/knn_memory.md): their centroids follow the keys more closely.
int DefaultNlist(int64_t capacity, int64_t exact_threshold);

enum class KnnMode { kExact, kIvf };
const char* KnnModeName(KnnMode mode);

// Top-k per (head, query), best first; entries beyond the visible count are invalid (zeros).
struct KnnResult {
  torch::Tensor keys;       // [H, Q, k, d] float32, the stored (normalised) keys of the hits
  torch::Tensor values;     // [H, Q, k, d] float32
  torch::Tensor scores;     // [H, Q, k] float32, exact inner products; 0 where invalid
  torch::Tensor valid;      // [H, Q, k] bool
  torch::Tensor positions;  // [H, Q, k] int64, -1 where invalid
};

class KnnMemory {
 public:
  static absl::StatusOr<std::unique_ptr<KnnMemory>> Create(const KnnMemoryConfig& config);
  ~KnnMemory();
  KnnMemory(const KnnMemory&) = delete;
  KnnMemory& operator=(const KnnMemory&) = delete;

  // Appends positions next_position() .. next_position() + n - 1. keys: [n, H, d] float32 CPU,
  // L2-normalised per head (not checked); values: [n, H, d] float32 CPU. Evicts the oldest
  // entries beyond capacity; may train the IVF indexes (once, when size first passes
  // exact_threshold: a one-off cost of seconds at 64K entries, see docs/results/knn_memory.md).
  absl::Status Append(const torch::Tensor& keys, const torch::Tensor& values);
  // Append of one position from plain arrays: keys, values [H, d] float32 each, row-major (a
  // decode step's row). The same entries as Append of [1, H, d], without its ~10 us of tensor
  // ops (a 16-row decode step appends 16 positions).
  absl::Status AppendOne(const float* keys, const float* values);

  // queries: [H, Q, d] float32 CPU, L2-normalised; lo, hi: [Q] int64, the window [lo_q, hi_q) of
  // positions query q may retrieve; k >= 1. Results are on the CPU.
  absl::StatusOr<KnnResult> Search(const torch::Tensor& queries, int k, const torch::Tensor& lo,
                                   const torch::Tensor& hi) const;

  // One hit of SearchOne: the exact inner product and the stored value row (valid until the next
  // Append); value == nullptr marks an empty place (the window held fewer than k entries).
  struct Hit {
    float score = 0.0f;
    const float* value = nullptr;  // [d] float32
  };
  // The decode hot path: one query per head, the exact top-k of the window [lo, hi) per head,
  // best first (equal scores: older position first), in plain loops over the rings: no LibTorch
  // op, no allocation once `scratch` has grown. Exact mode only (FAILED_PRECONDITION in IVF mode:
  // use Search). query: [H, d] float32, L2-normalised. hits: resized to H * k, head-major. Same
  // window checks as Search; the same hits as Search's up to ties and float rounding.
  absl::Status SearchOne(const float* query, int k, int64_t lo, int64_t hi, std::vector<Hit>& hits,
                         std::vector<std::pair<float, int64_t>>& scratch) const;

  // A deep copy (rings and indexes); the two are independent afterwards.
  std::unique_ptr<KnnMemory> Clone() const;

  // Durable sessions (docs/durability.md). WriteTo writes the whole state: positions, rings,
  // the IVF indexes (FAISS's format) and the eviction cursor. ReadFrom reads it into this
  // memory, which must have been created with the same heads, dim, capacity, first position,
  // exact threshold and nlist (FAILED_PRECONDITION naming the field otherwise; DATA_LOSS for
  // damaged bytes); afterwards every Search answers exactly as the written memory's would.
  void WriteTo(util::BinaryWriter& out) const;
  absl::Status ReadFrom(util::BinaryReader& in);
  // The entries appended at positions [position, next_position()), as keys and values
  // [n, H, d] (copies): what Append of them adds to a memory that stood at `position`. Needs
  // oldest_position() <= position <= next_position().
  std::pair<torch::Tensor, torch::Tensor> EntriesSince(int64_t position) const;
  // In IVF mode, the IVF list of each of those entries, head-major ([H * n]); empty in exact
  // mode. With them, AppendAssigned adds the entries to the lists they went to here, so a
  // memory rebuilt from deltas searches exactly like this one.
  std::vector<int64_t> IvfListsSince(int64_t position) const;
  // Append, but in IVF mode every entry goes to the list `lists` names (IvfListsSince's
  // layout) instead of the nearest centroid's. In exact mode `lists` must be empty (then it is
  // Append). INVALID_ARGUMENT when it does not fit the entries or the mode, or when the
  // append would cross exact_threshold (training depends on how appends were grouped).
  absl::Status AppendAssigned(const torch::Tensor& keys, const torch::Tensor& values,
                              const std::vector<int64_t>& lists);

  int64_t size() const;  // entries per head retained: min(appended, capacity)
  int64_t capacity() const { return config_.capacity; }
  int64_t next_position() const { return next_position_; }
  int64_t oldest_position() const { return next_position_ - size(); }
  KnnMode mode() const { return ivf_.empty() ? KnnMode::kExact : KnnMode::kIvf; }
  int nlist() const;  // IVF lists per head; 0 in exact mode
  // Entries per head the rings have room for: >= size(), <= capacity(); grows, never shrinks.
  int64_t allocated() const { return keys_.size(1); }
  // Rings (allocated) + IVF lists (codes and ids, allocated) + centroids.
  int64_t bytes() const;
  const KnnMemoryConfig& config() const { return config_; }

 private:
  explicit KnnMemory(const KnnMemoryConfig& config);

  // Grows the rings to hold min(appended, capacity) entries (appended = positions ever appended,
  // after the coming Append). RESOURCE_EXHAUSTED if the allocation fails; nothing changes then.
  absl::Status Reserve(int64_t appended);
  // After positions [first, first + kept) were written to the rings (and next_position_
  // advanced): the IVF lists take them (evicting as many), or the indexes are built when the
  // size first passes exact_threshold.
  absl::Status IndexAppended(int64_t first, int64_t kept);
  absl::Status BuildIvf();
  void AddToIvf(int64_t first, int64_t count);
  // AddToIvf with the lists given (AppendAssigned); `lists` head-major [H * count].
  void AddToIvfLists(int64_t first, int64_t count, const std::vector<int64_t>& lists);
  // Set by AppendAssigned for the duration of its Append: IndexAppended adds to these lists.
  const std::vector<int64_t>* assigned_lists_ = nullptr;
  void EvictFromIvf(int64_t appended);
  // Positions [H, Q, k] of the hits (-1 = none) for each mode.
  torch::Tensor SearchExact(const torch::Tensor& queries, int k, const torch::Tensor& lo,
                            const torch::Tensor& hi) const;
  torch::Tensor SearchIvf(const torch::Tensor& queries, int k, const torch::Tensor& lo,
                          const torch::Tensor& hi) const;
  // Gathers keys/values of `positions` from the rings, scores them exactly, sorts.
  KnnResult Finish(const torch::Tensor& queries, torch::Tensor positions) const;
  // INVALID_ARGUMENT unless [lo, hi) is a window Search may scan: lo <= hi, and no position in
  // it was appended and then evicted (the caller's capacity would be too small).
  absl::Status CheckWindow(int64_t lo, int64_t hi) const;
  int64_t SlotOf(int64_t position) const { return (position - config_.first_position) % capacity(); }

  KnnMemoryConfig config_;
  torch::Tensor keys_;            // [H, allocated, d] float32; slot = SlotOf(position)
  torch::Tensor values_;          // [H, allocated, d] float32
  int64_t next_position_ = 0;
  // IVF eviction: every list is trimmed once per evict_sweep_ positions, a few lists per append.
  int64_t evict_sweep_ = 1;
  int64_t evict_credit_ = 0;      // appended positions x nlist not yet spent on trimming lists
  int evict_cursor_ = 0;          // the next list to trim
  std::vector<std::unique_ptr<IvfHeadIndex>> ivf_;  // [H] in IVF mode, empty in exact mode
};

}  // namespace mnemo::knn

#endif  // MNEMO_ENGINE_KNN_KNN_MEMORY_H_
