// IvfHeadIndex: one attention head's approximate kNN index, a FAISS IndexIVFFlat (inner
// product) whose ids are absolute positions.
//
// Owned by a KnnMemory, which keeps the exact keys/values itself; this index holds a copy of the
// keys only to find candidates. Not thread-safe for writes; concurrent const calls (Search,
// Assign) are safe, which KnnMemory uses to search several heads at once.
//
// Invariant: every inverted list holds its ids in ascending order. Entries are added in position
// order and evicted only as a prefix of each list (EvictBelow), so the order survives, and a
// search restricted to a position range uses FAISS's sorted-range selector: a binary search per
// list instead of a membership test per entry.
//
// Coarse assignment runs in LibTorch (one matrix product against the centroids) rather than in
// FAISS: Debian's FAISS is a baseline x86-64 build whose flat scan is scalar for small batches,
// while LibTorch's OpenBLAS uses the CPU's vector units, and one product serves a whole batch.
#ifndef MNEMO_ENGINE_KNN_IVF_HEAD_INDEX_H_
#define MNEMO_ENGINE_KNN_IVF_HEAD_INDEX_H_

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace faiss {
struct IndexIVFFlat;
}  // namespace faiss

namespace mnemo::knn {

struct IvfOptions {
  int nlist = 1024;               // inverted lists (k-means centroids)
  int nprobe = 8;                 // lists scanned per query
  int train_iterations = 4;       // k-means iterations
  int train_points_per_list = 39; // k-means sample cap: nlist * this many points
  uint64_t seed = 1234;
};

class IvfHeadIndex {
 public:
  // Trains the coarse quantizer (spherical k-means) on `sample` [n, d] float32, n >= nlist.
  // The index starts empty.
  static absl::StatusOr<std::unique_ptr<IvfHeadIndex>> Train(const torch::Tensor& sample,
                                                             const IvfOptions& options);
  ~IvfHeadIndex();

  // A deep copy (centroids, lists and ids).
  std::unique_ptr<IvfHeadIndex> Clone() const;

  // The whole index (centroids, lists and ids) as bytes (FAISS's own index format), and back:
  // Deserialize(Serialize()) searches exactly like the original. DATA_LOSS for bytes FAISS
  // cannot read or that hold another kind of index.
  std::string Serialize() const;
  static absl::StatusOr<std::unique_ptr<IvfHeadIndex>> Deserialize(const std::string& bytes);

  // Adds `keys` [n, d] (contiguous float32) with ids first_id .. first_id + n - 1; first_id must
  // exceed every id already held (ids stay ascending in each list).
  void Add(const torch::Tensor& keys, int64_t first_id);

  // The list each of the ids [first_id, first_id + count) was added to (every one must be
  // held): what AddToLists needs to add them again exactly. Walks each list's tail (ids are
  // ascending), so it costs O(nlist + count).
  std::vector<int64_t> ListsOf(int64_t first_id, int64_t count) const;
  // Add, with the list of each key given (ListsOf of another index with the same centroids)
  // instead of computed: the same lists bit for bit whatever batches the keys came in.
  void AddToLists(const torch::Tensor& keys, int64_t first_id, const int64_t* lists);

  // Removes the entries with id < `below` (a prefix of each list) from `count` lists, starting at
  // list `first_list` and wrapping around. Costs a move of those lists' remaining entries.
  void EvictBelow(int64_t below, int first_list, int count);

  // The `nprobe` nearest lists of each query: ([n, nprobe] int64 list ids, [n, nprobe] float32
  // inner products with their centroids), best first. queries: [n, d] float32.
  std::pair<torch::Tensor, torch::Tensor> Assign(const torch::Tensor& queries, int nprobe) const;

  // The k best entries (inner product, descending) among the lists `assign` names whose ids lie
  // in [lo, hi). queries [n, d], assign/centroid_scores [n, nprobe] from Assign; writes
  // scores [n, k] and ids [n, k], id -1 where fewer than k entries were found.
  void Search(int64_t n, const float* queries, int64_t k, const int64_t* assign,
              const float* centroid_scores, int nprobe, int64_t lo, int64_t hi, float* scores,
              int64_t* ids) const;

  int64_t size() const;    // entries held (including ones not yet evicted)
  int nlist() const;
  int dim() const;         // d, the keys' dimension
  int64_t bytes() const;   // list codes + ids (allocated) + centroids, both copies

 private:
  IvfHeadIndex() = default;

  std::unique_ptr<faiss::IndexIVFFlat> index_;  // owns its quantizer (an IndexFlatIP)
  torch::Tensor centroids_;                     // [nlist, d], the quantizer's vectors
};

}  // namespace mnemo::knn

#endif  // MNEMO_ENGINE_KNN_IVF_HEAD_INDEX_H_
