#include "engine/knn/ivf_head_index.h"

#include <faiss/Clustering.h>
#include <faiss/IndexFlat.h>
#include <faiss/IndexIVFFlat.h>
#include <faiss/clone_index.h>
#include <faiss/impl/io.h>
#include <faiss/index_io.h>
#include <faiss/impl/IDSelector.h>
#include <faiss/invlists/InvertedLists.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/knn/ivf_blob_check.h"

namespace mnemo::knn {
namespace {

// Rows per coarse-assignment product: keeps the [rows, nlist] score block near 16 MB.
int64_t AssignChunk(int64_t nlist) { return std::max<int64_t>(1, (int64_t{1} << 22) / nlist); }

// An index's metric as FAISS read it from a blob: any 32-bit value, so it is copied out as an
// int (loading a value outside faiss::MetricType's enumerators as the enum is undefined).
int MetricOf(const faiss::Index& index) {
  int metric = 0;
  static_assert(sizeof(metric) == sizeof(index.metric_type));
  std::memcpy(&metric, &index.metric_type, sizeof(metric));
  return metric;
}

// Spherical k-means of x [n, d] (n >= nlist) into nlist unit centroids [nlist, d]. FAISS samples
// at most train_points_per_list * nlist of the points.
torch::Tensor KMeans(const torch::Tensor& x, const IvfOptions& options) {
  const int64_t d = x.size(1);
  const int k = options.nlist;
  faiss::ClusteringParameters cp;
  cp.niter = options.train_iterations;
  cp.spherical = true;  // unit-norm centroids: the right k-means for inner-product search
  cp.max_points_per_centroid = options.train_points_per_list;
  cp.min_points_per_centroid = 1;  // few points per list is a choice here, not a mistake
  cp.seed = static_cast<int>(options.seed & 0x7fffffff);
  faiss::Clustering clustering(static_cast<int>(d), k, cp);
  faiss::IndexFlatIP assign(d);
  clustering.train(x.size(0), x.data_ptr<float>(), assign);
  return torch::from_blob(clustering.centroids.data(), {k, d}, torch::kFloat32).clone();
}

}  // namespace

IvfHeadIndex::~IvfHeadIndex() = default;

absl::StatusOr<std::unique_ptr<IvfHeadIndex>> IvfHeadIndex::Train(const torch::Tensor& sample,
                                                                  const IvfOptions& options) {
  const int64_t n = sample.size(0), d = sample.size(1);
  if (options.nlist < 1 || n < options.nlist) {
    return absl::InvalidArgumentError(absl::StrCat("IVF training needs at least nlist = ",
                                                   options.nlist, " points; got ", n));
  }
  torch::Tensor x = sample.to(torch::kFloat32).contiguous();
  std::unique_ptr<IvfHeadIndex> out(new IvfHeadIndex());
  try {
    out->centroids_ = KMeans(x, options);
    auto quantizer = std::make_unique<faiss::IndexFlatIP>(d);
    quantizer->add(options.nlist, out->centroids_.data_ptr<float>());
    out->index_ = std::make_unique<faiss::IndexIVFFlat>(quantizer.get(), d, options.nlist,
                                                        faiss::METRIC_INNER_PRODUCT);
    out->index_->own_fields = true;
    quantizer.release();  // now owned by the index
    out->index_->nprobe = std::min(options.nprobe, options.nlist);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("IVF training failed: ", e.what()));
  }
  return out;
}

std::unique_ptr<IvfHeadIndex> IvfHeadIndex::Clone() const {
  std::unique_ptr<IvfHeadIndex> out(new IvfHeadIndex());
  out->index_.reset(dynamic_cast<faiss::IndexIVFFlat*>(faiss::clone_index(index_.get())));
  out->centroids_ = centroids_.clone();
  return out;
}

std::string IvfHeadIndex::Serialize() const {
  faiss::VectorIOWriter writer;
  faiss::write_index(index_.get(), &writer);
  return std::string(writer.data.begin(), writer.data.end());
}

absl::StatusOr<std::unique_ptr<IvfHeadIndex>> IvfHeadIndex::Deserialize(const std::string& bytes) {
  // FAISS sizes its vectors from the blob's counts before reading them: those are checked
  // against the bytes first (the blob may come from an ImportSession call).
  if (absl::Status layout = CheckIvfBlob(bytes); !layout.ok()) return layout;
  faiss::VectorIOReader reader;
  reader.data.assign(bytes.begin(), bytes.end());
  std::unique_ptr<faiss::Index> index;
  try {
    index.reset(faiss::read_index(&reader));
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("IVF index: FAISS cannot read it: ", e.what()));
  }
  auto* ivf = dynamic_cast<faiss::IndexIVFFlat*>(index.get());
  auto* quantizer = ivf != nullptr ? dynamic_cast<faiss::IndexFlatIP*>(ivf->quantizer) : nullptr;
  // The metrics too: FAISS makes the quantizer's class from the blob's tag but takes its metric
  // from a later field, and Serialize would write a flat index of another metric under another
  // tag, which this check then refuses (a session that imports must export again).
  if (quantizer == nullptr || MetricOf(*quantizer) != faiss::METRIC_INNER_PRODUCT ||
      MetricOf(*ivf) != faiss::METRIC_INNER_PRODUCT ||
      dynamic_cast<faiss::ArrayInvertedLists*>(ivf->invlists) == nullptr) {
    return absl::DataLossError("IVF index: not an inner-product IndexIVFFlat with array lists");
  }
  std::unique_ptr<IvfHeadIndex> out(new IvfHeadIndex());
  index.release();
  out->index_.reset(ivf);
  // The quantizer's vectors are the centroids Assign multiplies by.
  out->centroids_ = torch::from_blob(quantizer->get_xb(), {ivf->nlist, ivf->d}, torch::kFloat32)
                        .clone();
  return out;
}

void IvfHeadIndex::Add(const torch::Tensor& keys, int64_t first_id) {
  const int64_t n = keys.size(0);
  if (n == 0) return;
  torch::Tensor list_ids = Assign(keys, 1).first.contiguous();  // [n, 1]
  const int64_t* lists = list_ids.data_ptr<int64_t>();
  const auto* codes = reinterpret_cast<const uint8_t*>(keys.data_ptr<float>());
  // What IndexIVFFlat::add_core does, minus its OpenMP region: waking a sleeping thread
  // (OMP_WAIT_POLICY=PASSIVE) costs more than appending one decode step's entry.
  for (int64_t i = 0; i < n; ++i) {
    index_->invlists->add_entry(lists[i], first_id + i, codes + i * index_->code_size);
  }
  index_->ntotal += n;
}

std::vector<int64_t> IvfHeadIndex::ListsOf(int64_t first_id, int64_t count) const {
  const auto* lists = dynamic_cast<const faiss::ArrayInvertedLists*>(index_->invlists);
  std::vector<int64_t> out(static_cast<size_t>(count), -1);
  for (size_t l = 0; l < lists->ids.size(); ++l) {
    const std::vector<faiss::Index::idx_t>& ids = lists->ids[l];
    for (auto it = ids.rbegin(); it != ids.rend() && *it >= first_id; ++it) {
      if (*it < first_id + count) out[static_cast<size_t>(*it - first_id)] = static_cast<int64_t>(l);
    }
  }
  return out;
}

void IvfHeadIndex::AddToLists(const torch::Tensor& keys, int64_t first_id,
                              const int64_t* lists) {
  const int64_t n = keys.size(0);
  const torch::Tensor contiguous = keys.contiguous();
  const auto* codes = reinterpret_cast<const uint8_t*>(contiguous.data_ptr<float>());
  for (int64_t i = 0; i < n; ++i) {
    index_->invlists->add_entry(lists[i], first_id + i, codes + i * index_->code_size);
  }
  index_->ntotal += n;
}

void IvfHeadIndex::EvictBelow(int64_t below, int first_list, int count) {
  auto* lists = dynamic_cast<faiss::ArrayInvertedLists*>(index_->invlists);
  const size_t code_size = index_->code_size;
  const int nlist = static_cast<int>(lists->ids.size());
  int64_t removed = 0;
  for (int j = 0; j < std::min(count, nlist); ++j) {
    const int l = (first_list + j) % nlist;
    std::vector<faiss::Index::idx_t>& ids = lists->ids[l];
    const auto cut = std::lower_bound(ids.begin(), ids.end(), below);
    const size_t stale = cut - ids.begin();
    if (stale == 0) continue;
    ids.erase(ids.begin(), cut);
    std::vector<uint8_t>& codes = lists->codes[l];
    codes.erase(codes.begin(), codes.begin() + stale * code_size);
    removed += static_cast<int64_t>(stale);
  }
  index_->ntotal -= removed;
}

std::pair<torch::Tensor, torch::Tensor> IvfHeadIndex::Assign(const torch::Tensor& queries,
                                                             int nprobe) const {
  const int64_t n = queries.size(0), nlist = centroids_.size(0);
  nprobe = static_cast<int>(std::min<int64_t>(nprobe, nlist));
  torch::Tensor lists = torch::empty({n, nprobe}, torch::kInt64);
  torch::Tensor scores = torch::empty({n, nprobe}, torch::kFloat32);
  const int64_t chunk = AssignChunk(nlist);
  for (int64_t start = 0; start < n; start += chunk) {
    const int64_t rows = std::min(chunk, n - start);
    // One row (a decode step): a matrix-vector product, ~3x faster in OpenBLAS than a GEMM.
    torch::Tensor s = rows == 1 ? torch::mv(centroids_, queries[start]).unsqueeze(0)
                                : torch::mm(queries.narrow(0, start, rows), centroids_.t());
    if (nprobe == 1) {
      auto best = s.max(1, /*keepdim=*/true);
      scores.narrow(0, start, rows).copy_(std::get<0>(best));
      lists.narrow(0, start, rows).copy_(std::get<1>(best));
    } else {
      auto best = s.topk(nprobe, 1);
      scores.narrow(0, start, rows).copy_(std::get<0>(best));
      lists.narrow(0, start, rows).copy_(std::get<1>(best));
    }
  }
  return {lists, scores};
}

void IvfHeadIndex::Search(int64_t n, const float* queries, int64_t k, const int64_t* assign,
                          const float* centroid_scores, int nprobe, int64_t lo, int64_t hi,
                          float* scores, int64_t* ids) const {
  faiss::SearchParametersIVF params;
  params.nprobe = nprobe;
  // Lists hold ascending ids, so FAISS can binary-search the window in each list.
  faiss::IDSelectorRange window(lo, hi, /*assume_sorted=*/true);
  params.sel = &window;
  index_->search_preassigned(n, queries, k, assign, centroid_scores, scores, ids,
                             /*store_pairs=*/false, &params);
}

int64_t IvfHeadIndex::size() const { return index_->ntotal; }

int IvfHeadIndex::nlist() const { return static_cast<int>(index_->nlist); }

int IvfHeadIndex::dim() const { return static_cast<int>(index_->d); }

int64_t IvfHeadIndex::bytes() const {
  int64_t total = 0;
  const auto* lists = dynamic_cast<const faiss::ArrayInvertedLists*>(index_->invlists);
  for (size_t l = 0; l < lists->ids.size(); ++l) {
    total += static_cast<int64_t>(lists->codes[l].capacity() +
                                  lists->ids[l].capacity() * sizeof(faiss::Index::idx_t) +
                                  sizeof(lists->codes[l]) + sizeof(lists->ids[l]));
  }
  // The quantizer's centroids plus our LibTorch copy of them.
  total += 2 * centroids_.numel() * static_cast<int64_t>(sizeof(float));
  return total;
}

}  // namespace mnemo::knn
