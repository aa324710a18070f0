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
#include "engine/knn/knn_memory_internal.h"
#include "engine/util/shape_string.h"
#include "engine/util/status_macros.h"

namespace mnemo::knn {
namespace {

using internal::CheckFloatCpu;
using internal::SerialIfSmall;

// The IVF lists are swept free of evicted entries once per capacity / this many positions, so
// they hold at most ~6% stale entries.
constexpr int64_t kEvictSweepFraction = 16;

// The rings' first allocation (or the capacity, if smaller): 2 MiB of keys and values for
// 4 heads of 64 dims, so short sessions do not grow them a dozen times.
constexpr int64_t kMinRingEntries = 1024;

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
    if (assigned_lists_ != nullptr) {
      AddToIvfLists(first, kept, *assigned_lists_);
    } else {
      AddToIvf(first, kept);
    }
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

void KnnMemory::WriteTo(util::BinaryWriter& out) const {
  out.I64(config_.heads);
  out.I64(config_.dim);
  out.I64(config_.capacity);
  out.I64(config_.first_position);
  out.I64(config_.exact_threshold);
  out.I64(config_.nlist);
  out.I64(next_position_);
  out.I64(evict_sweep_);
  out.I64(evict_credit_);
  out.I64(evict_cursor_);
  out.Tensor(keys_);
  out.Tensor(values_);
  out.I64(static_cast<int64_t>(ivf_.size()));
  for (const auto& index : ivf_) out.Bytes(index->Serialize());
}

absl::Status KnnMemory::ReadFrom(util::BinaryReader& in) {
  const int64_t expected[] = {config_.heads,      config_.dim,             config_.capacity,
                              config_.first_position, config_.exact_threshold, config_.nlist};
  const char* names[] = {"heads", "dim", "capacity", "first_position", "exact_threshold", "nlist"};
  for (int i = 0; i < 6; ++i) {
    MNEMO_ASSIGN_OR_RETURN(int64_t value, in.I64(absl::StrCat("kNN memory ", names[i])));
    if (value != expected[i]) {
      return absl::FailedPreconditionError(
          absl::StrCat("kNN memory: the file's ", names[i], " is ", value, ", this memory's ",
                       expected[i], " (saved with other memory options or another model)"));
    }
  }
  MNEMO_ASSIGN_OR_RETURN(const int64_t next, in.I64("kNN memory next_position"));
  MNEMO_ASSIGN_OR_RETURN(const int64_t sweep, in.I64("kNN memory evict_sweep"));
  MNEMO_ASSIGN_OR_RETURN(const int64_t credit, in.I64("kNN memory evict_credit"));
  MNEMO_ASSIGN_OR_RETURN(const int64_t cursor, in.I64("kNN memory evict_cursor"));
  MNEMO_ASSIGN_OR_RETURN(torch::Tensor keys, in.NewTensor("kNN memory keys"));
  MNEMO_ASSIGN_OR_RETURN(torch::Tensor values, in.NewTensor("kNN memory values"));
  // The eviction state as EvictFromIvf keeps it (its cursor indexes a list, and is an int).
  if (next < config_.first_position || sweep < 1 ||
      sweep > std::max<int64_t>(1, config_.capacity) || credit < 0 || credit >= sweep ||
      cursor < 0 || cursor >= std::max(1, config_.nlist)) {
    return absl::DataLossError("kNN memory: inconsistent positions or eviction state");
  }
  const int64_t held = std::min(next - config_.first_position, config_.capacity);
  if (!keys.defined() || !values.defined() || keys.scalar_type() != torch::kFloat32 ||
      keys.dim() != 3 || keys.size(0) != config_.heads || keys.size(2) != config_.dim ||
      keys.size(1) < held || keys.size(1) > config_.capacity ||
      !values.sizes().equals(keys.sizes()) || values.scalar_type() != torch::kFloat32) {
    return absl::DataLossError("kNN memory: inconsistent positions or ring shapes");
  }
  MNEMO_ASSIGN_OR_RETURN(const int64_t indexes, in.Count("kNN memory IVF indexes", config_.heads));
  if (indexes != 0 && indexes != config_.heads) {
    return absl::DataLossError("kNN memory: IVF indexes for some heads only");
  }
  std::vector<std::unique_ptr<IvfHeadIndex>> ivf;
  for (int64_t h = 0; h < indexes; ++h) {
    MNEMO_ASSIGN_OR_RETURN(std::string bytes, in.Bytes("kNN memory IVF index"));
    MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<IvfHeadIndex> index,
                           IvfHeadIndex::Deserialize(bytes));
    // Searches assign queries of config_.dim to its centroids; eviction walks config_.nlist.
    if (index->nlist() != config_.nlist || index->dim() != config_.dim) {
      return absl::DataLossError(absl::StrCat("kNN memory: an IVF index of ", index->nlist(),
                                              " lists of dimension ", index->dim(), ", not ",
                                              config_.nlist, " of ", config_.dim));
    }
    ivf.push_back(std::move(index));
  }
  keys_ = std::move(keys);
  values_ = std::move(values);
  next_position_ = next;
  evict_sweep_ = sweep;
  evict_credit_ = credit;
  evict_cursor_ = static_cast<int>(cursor);
  ivf_ = std::move(ivf);
  return absl::OkStatus();
}

std::pair<torch::Tensor, torch::Tensor> KnnMemory::EntriesSince(int64_t position) const {
  const int64_t n = next_position_ - position;
  if (n == 0) {
    torch::Tensor none = torch::empty({0, config_.heads, config_.dim}, torch::kFloat32);
    return {none, none.clone()};
  }
  // The slots are one run, or two when the run wraps past the end of the ring.
  const int64_t slot = SlotOf(position), head_run = std::min(n, capacity() - slot);
  auto gather = [&](const torch::Tensor& ring) {  // [H, allocated, d] -> [n, H, d]
    torch::Tensor run = ring.narrow(1, slot, head_run);
    if (n > head_run) run = torch::cat({run, ring.narrow(1, 0, n - head_run)}, 1);
    return run.transpose(0, 1).contiguous();
  };
  return {gather(keys_), gather(values_)};
}

std::vector<int64_t> KnnMemory::IvfListsSince(int64_t position) const {
  if (ivf_.empty()) return {};
  const int64_t n = next_position_ - position;
  std::vector<int64_t> lists;
  lists.reserve(static_cast<size_t>(n * config_.heads));
  for (const auto& index : ivf_) {
    std::vector<int64_t> head = index->ListsOf(position, n);
    lists.insert(lists.end(), head.begin(), head.end());
  }
  return lists;
}

absl::Status KnnMemory::AppendAssigned(const torch::Tensor& keys, const torch::Tensor& values,
                                       const std::vector<int64_t>& lists) {
  const int64_t n = keys.dim() == 3 ? keys.size(0) : 0;
  if (ivf_.empty()) {
    if (!lists.empty()) {
      return absl::InvalidArgumentError("AppendAssigned: IVF lists for a memory in exact mode");
    }
    if (size() + n > config_.exact_threshold && config_.capacity > config_.exact_threshold) {
      return absl::InvalidArgumentError(
          "AppendAssigned: the entries would cross exact_threshold (the IVF index is trained on "
          "what is present then)");
    }
    return Append(keys, values);
  }
  const int64_t kept = std::min(n, capacity());
  if (static_cast<int64_t>(lists.size()) != n * config_.heads) {
    return absl::InvalidArgumentError(absl::StrCat("AppendAssigned: ", lists.size(),
                                                   " list ids for ", n, " entries x ",
                                                   config_.heads, " heads"));
  }
  for (int64_t list : lists) {
    if (list < 0 || list >= nlist()) {
      return absl::InvalidArgumentError(absl::StrCat("AppendAssigned: list id ", list,
                                                     " outside [0, ", nlist(), ")"));
    }
  }
  // Only the last `kept` entries survive an append longer than the capacity: their lists.
  std::vector<int64_t> kept_lists;
  kept_lists.reserve(static_cast<size_t>(kept * config_.heads));
  for (int64_t h = 0; h < config_.heads; ++h) {
    kept_lists.insert(kept_lists.end(), lists.begin() + h * n + (n - kept),
                      lists.begin() + (h + 1) * n);
  }
  assigned_lists_ = &kept_lists;
  absl::Status status = Append(keys, values);
  assigned_lists_ = nullptr;
  return status;
}

void KnnMemory::AddToIvfLists(int64_t first, int64_t count, const std::vector<int64_t>& lists) {
  const int64_t slot = SlotOf(first), head_run = std::min(count, capacity() - slot);
  for (int h = 0; h < config_.heads; ++h) {
    torch::Tensor ring = keys_[h];  // [capacity, d], contiguous
    const int64_t* head = lists.data() + h * count;
    ivf_[h]->AddToLists(ring.narrow(0, slot, head_run), first, head);
    if (count > head_run) {
      ivf_[h]->AddToLists(ring.narrow(0, 0, count - head_run), first + head_run,
                          head + head_run);
    }
  }
}

}  // namespace mnemo::knn
