#include "engine/datastore/datastore.h"

#include <c10/util/Half.h>
#include <faiss/Index.h>
#include <faiss/IndexIVF.h>
#include <faiss/index_io.h>
#include <faiss/invlists/OnDiskInvertedLists.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/util/files.h"
#include "engine/util/status_macros.h"

namespace mnemo::datastore {
namespace {

namespace fs = std::filesystem;

float HalfToFloat(uint16_t bits) {
  c10::Half h;
  h.x = bits;
  return static_cast<float>(h);
}

}  // namespace

float SquaredL2ToHalf(const float* query, const uint16_t* key, int d) {
  float sum = 0;
  for (int i = 0; i < d; ++i) {
    const float diff = query[i] - HalfToFloat(key[i]);
    sum += diff * diff;
  }
  return sum;
}

Datastore::~Datastore() = default;

absl::StatusOr<std::unique_ptr<Datastore>> Datastore::Open(const std::string& dir,
                                                           const ModelId& model) {
  const fs::path root(dir);
  const std::string manifest_path = (root / kManifestFile).string();
  absl::StatusOr<std::string> text = util::ReadFile(manifest_path);
  if (!text.ok()) {
    return absl::Status(text.status().code(), absl::StrCat("datastore: ", text.status().message()));
  }
  absl::StatusOr<Manifest> manifest = ParseManifest(*text);
  if (!manifest.ok()) {
    return absl::Status(manifest.status().code(),
                        absl::StrCat(manifest_path, ": ", manifest.status().message()));
  }
  if (!(manifest->model == model)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "datastore ", dir, " was built for model ", manifest->model.ToString(),
        ", but the loaded model is ", model.ToString(), "; rebuild it with mnemo-index"));
  }
  const int64_t entries = manifest->entries;
  const int d = manifest->d;
  if (manifest->values_bytes != entries * 4 || manifest->keys_bytes != entries * d * 2) {
    return absl::DataLossError(absl::StrCat(manifest_path, ": file sizes disagree with entries ",
                                            entries, " and d ", d));
  }

  auto out = std::unique_ptr<Datastore>(new Datastore());
  out->dir_ = dir;
  out->manifest_ = *manifest;
  MNEMO_ASSIGN_OR_RETURN(out->values_,
                         MappedFile::Open((root / kValuesFile).string(), manifest->values_bytes));
  MNEMO_ASSIGN_OR_RETURN(out->keys_,
                         MappedFile::Open((root / kKeysFile).string(), manifest->keys_bytes));
  const std::string index_path = (root / kIndexFile).string();
  // Checks presence and size before FAISS reads a byte.
  MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> index_file,
                         MappedFile::Open(index_path, manifest->index_bytes));
  index_file.reset();
  try {
    // FAISS 1.7.3: IO_FLAG_MMAP maps an IVF index's inverted lists from the file
    // (OnDiskInvertedLists, read-only); other index types ignore it and read into RAM.
    const int flags =
        manifest->index_type == IndexType::kIvfPq ? faiss::IO_FLAG_MMAP : faiss::IO_FLAG_READ_ONLY;
    out->index_.reset(faiss::read_index(index_path.c_str(), flags));
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("datastore: cannot read ", index_path, ": ", e.what()));
  }
  if (out->index_->d != d || out->index_->ntotal != entries ||
      out->index_->metric_type != faiss::METRIC_L2) {
    return absl::DataLossError(absl::StrCat(index_path, " holds ", out->index_->ntotal,
                                            " vectors of dimension ", out->index_->d,
                                            ", the manifest says ", entries, " of ", d, " (L2)"));
  }
  if (const auto* ivf = dynamic_cast<const faiss::IndexIVF*>(out->index_.get())) {
    out->lists_mapped_ = dynamic_cast<const faiss::OnDiskInvertedLists*>(ivf->invlists) != nullptr;
  }
  return out;
}

std::vector<float> Datastore::Key(int64_t id) const {
  const int d = manifest_.d;
  const auto* row = static_cast<const uint16_t*>(keys_->data()) + id * d;
  std::vector<float> key(static_cast<size_t>(d));
  for (int i = 0; i < d; ++i) key[i] = HalfToFloat(row[i]);
  return key;
}

int32_t Datastore::Value(int64_t id) const {
  int32_t value;
  std::memcpy(&value, static_cast<const char*>(values_->data()) + id * 4, 4);
  return value;
}

absl::StatusOr<std::vector<std::vector<Hit>>> Datastore::Search(
    const torch::Tensor& queries, const SearchOptions& options) const {
  const int d = manifest_.d;
  if (queries.dim() != 2 || queries.size(1) != d || queries.scalar_type() != torch::kFloat32) {
    return absl::InvalidArgumentError(
        absl::StrCat("datastore search: queries must be [Q, ", d, "] float32"));
  }
  if (options.k < 1) return absl::InvalidArgumentError("datastore search: k must be >= 1");
  const torch::Tensor q = queries.to(torch::kCPU).contiguous();
  const int64_t n = q.size(0);
  const int64_t k = std::min<int64_t>(options.k, manifest_.entries);
  std::vector<std::vector<Hit>> results(static_cast<size_t>(n));
  if (n == 0 || k == 0) return results;

  std::vector<float> distances(static_cast<size_t>(n * k));
  std::vector<faiss::Index::idx_t> labels(static_cast<size_t>(n * k));
  faiss::SearchParametersIVF ivf;
  ivf.nprobe = std::max(1, options.nprobe);
  const faiss::SearchParameters* params =
      manifest_.index_type == IndexType::kIvfPq ? &ivf : nullptr;
  try {
    index_->search(n, q.data_ptr<float>(), k, distances.data(), labels.data(), params);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("datastore search: ", e.what()));
  }
  const auto* keys = static_cast<const uint16_t*>(keys_->data());
  const float* qp = q.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    std::vector<Hit>& hits = results[static_cast<size_t>(i)];
    hits.reserve(static_cast<size_t>(k));
    for (int64_t j = 0; j < k; ++j) {
      const int64_t id = labels[static_cast<size_t>(i * k + j)];
      if (id < 0 || id >= manifest_.entries) continue;  // IVF found fewer than k
      hits.push_back(Hit{id, SquaredL2ToHalf(qp + i * d, keys + id * d, d), Value(id)});
    }
    std::stable_sort(hits.begin(), hits.end(), [](const Hit& a, const Hit& b) {
      return a.distance < b.distance || (a.distance == b.distance && a.id < b.id);
    });
  }
  return results;
}

}  // namespace mnemo::datastore
