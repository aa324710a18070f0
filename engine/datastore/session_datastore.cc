#include "engine/datastore/session_datastore.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace mnemo::datastore {

SessionDatastore::SessionDatastore(int d, int64_t max_entries)
    : d_(d), max_entries_(max_entries) {}

void SessionDatastore::Reserve(int64_t entries) {
  const int64_t capacity = keys_.defined() ? keys_.size(0) : 0;
  if (entries <= capacity) return;
  int64_t grown = std::max<int64_t>({entries, capacity * 2, 1024});
  if (max_entries_ > 0) grown = std::min(grown, std::max(entries, max_entries_));
  torch::Tensor keys = torch::empty({grown, d_}, torch::kFloat32);
  torch::Tensor norms = torch::empty({grown}, torch::kFloat32);
  if (entries_ > 0) {
    keys.narrow(0, 0, entries_).copy_(keys_.narrow(0, 0, entries_));
    norms.narrow(0, 0, entries_).copy_(norms_.narrow(0, 0, entries_));
  }
  keys_ = keys;
  norms_ = norms;
}

absl::Status SessionDatastore::Append(const torch::Tensor& keys,
                                      const std::vector<int32_t>& values) {
  if (keys.dim() != 2 || keys.size(1) != d_ || keys.size(0) != static_cast<int64_t>(values.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("session datastore: keys must be [", values.size(), ", ", d_, "]"));
  }
  const int64_t n = keys.size(0);
  if (max_entries_ > 0 && entries_ + n > max_entries_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the session datastore holds ", entries_, " entries; adding ", n, " would pass its limit of ",
        max_entries_, " (mnemo-server --max_session_datastore_entries)"));
  }
  if (n == 0) return absl::OkStatus();
  Reserve(entries_ + n);
  torch::Tensor k = keys.to(torch::kCPU, torch::kFloat32);
  keys_.narrow(0, entries_, n).copy_(k);
  norms_.narrow(0, entries_, n).copy_(k.pow(2).sum(1));
  values_.insert(values_.end(), values.begin(), values.end());
  entries_ += n;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::vector<Hit>>> SessionDatastore::Search(
    const torch::Tensor& queries, const SearchOptions& options) const {
  if (queries.dim() != 2 || queries.size(1) != d_ || queries.scalar_type() != torch::kFloat32) {
    return absl::InvalidArgumentError(
        absl::StrCat("datastore search: queries must be [Q, ", d_, "] float32"));
  }
  if (options.k < 1) return absl::InvalidArgumentError("datastore search: k must be >= 1");
  const int64_t q = queries.size(0);
  std::vector<std::vector<Hit>> results(static_cast<size_t>(q));
  const int64_t k = std::min<int64_t>(options.k, entries_);
  if (q == 0 || k == 0) return results;

  const torch::Tensor queries_c = queries.to(torch::kCPU).contiguous();
  const torch::Tensor keys = keys_.narrow(0, 0, entries_);  // [N, d]
  // Ranking only needs ||k||^2 - 2 q.k (||q||^2 is the same for every key of a row).
  torch::Tensor rank = norms_.narrow(0, 0, entries_).unsqueeze(0) - 2 * queries_c.mm(keys.t());
  torch::Tensor ids = std::get<1>(rank.topk(k, /*dim=*/1, /*largest=*/false)).contiguous();  // [Q, k]
  const int64_t* id = ids.data_ptr<int64_t>();
  const float* qp = queries_c.data_ptr<float>();
  const float* kp = keys_.data_ptr<float>();
  for (int64_t i = 0; i < q; ++i) {
    std::vector<Hit>& hits = results[static_cast<size_t>(i)];
    hits.reserve(static_cast<size_t>(k));
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = id[i * k + j];
      // Exact distance, not the expanded form above (which loses digits to cancellation).
      float sum = 0;
      for (int c = 0; c < d_; ++c) {
        const float diff = qp[i * d_ + c] - kp[e * d_ + c];
        sum += diff * diff;
      }
      hits.push_back(Hit{e, sum, values_[static_cast<size_t>(e)]});
    }
    std::sort(hits.begin(), hits.end(), [](const Hit& a, const Hit& b) {
      return a.distance < b.distance || (a.distance == b.distance && a.id < b.id);
    });
  }
  return results;
}

int64_t SessionDatastore::bytes() const {
  const int64_t capacity = keys_.defined() ? keys_.size(0) : 0;
  return capacity * (d_ + 1) * static_cast<int64_t>(sizeof(float)) +
         static_cast<int64_t>(values_.capacity() * sizeof(int32_t));
}

std::unique_ptr<SessionDatastore> SessionDatastore::Clone() const {
  auto copy = std::make_unique<SessionDatastore>(d_, max_entries_);
  if (entries_ > 0) {
    copy->keys_ = keys_.narrow(0, 0, entries_).clone();
    copy->norms_ = norms_.narrow(0, 0, entries_).clone();
    copy->values_ = values_;
    copy->entries_ = entries_;
  }
  return copy;
}

void SessionDatastore::WriteTo(util::BinaryWriter& out) const {
  out.I64(d_);
  out.I64(max_entries_);
  out.I64(entries_);
  if (entries_ == 0) return;
  out.Tensor(keys_.narrow(0, 0, entries_));
  out.Tensor(norms_.narrow(0, 0, entries_));
  out.Pod(values_);
}

absl::StatusOr<std::unique_ptr<SessionDatastore>> SessionDatastore::ReadFrom(
    util::BinaryReader& in) {
  absl::StatusOr<int64_t> d = in.Count("session datastore d", 1 << 20);
  absl::StatusOr<int64_t> max_entries =
      d.ok() ? in.Count("session datastore max_entries", int64_t{1} << 40) : d.status();
  absl::StatusOr<int64_t> entries =
      max_entries.ok() ? in.Count("session datastore entries", int64_t{1} << 40)
                       : max_entries.status();
  if (!entries.ok()) return entries.status();
  auto store = std::make_unique<SessionDatastore>(static_cast<int>(*d), *max_entries);
  if (*entries == 0) return store;
  absl::StatusOr<torch::Tensor> keys = in.NewTensor("session datastore keys");
  absl::StatusOr<torch::Tensor> norms =
      keys.ok() ? in.NewTensor("session datastore norms") : keys.status();
  absl::StatusOr<std::vector<int32_t>> values =
      norms.ok() ? in.Pod<int32_t>("session datastore values") : norms.status();
  if (!values.ok()) return values.status();
  if (!keys->defined() || !norms->defined() || keys->scalar_type() != torch::kFloat32 ||
      norms->scalar_type() != torch::kFloat32 || keys->dim() != 2 || keys->size(0) != *entries ||
      keys->size(1) != *d || norms->dim() != 1 || norms->size(0) != *entries ||
      static_cast<int64_t>(values->size()) != *entries) {
    return absl::DataLossError("session datastore: entry counts or shapes do not match");
  }
  store->keys_ = std::move(*keys);
  store->norms_ = std::move(*norms);
  store->values_ = std::move(*values);
  store->entries_ = *entries;
  return store;
}

}  // namespace mnemo::datastore
