#include "engine/memory/session_memory.h"

#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/util/huge_pages.h"

namespace mnemo::memory {
namespace {

// Complete groups formed beyond the due ones (segment_plan.h): batches of up to 17 groups per
// pass over the compression weights in decode, where one group falls due every rate tokens.
constexpr int64_t kGroupsAhead = 16;

// `values` as a tensor of `type` on `device`. On the CPU the tensor takes over the vector's
// buffer: no copy and no op, which matters because a decode step plans every row (a handful
// of small tensors each). Elsewhere it is copied to the device.
template <typename T>
torch::Tensor ToTensor(std::vector<T> values, std::vector<int64_t> sizes, torch::ScalarType type,
                       torch::Device device) {
  if (values.empty()) return torch::empty(sizes, torch::TensorOptions().dtype(type).device(device));
  auto* owned = new std::vector<T>(std::move(values));
  torch::Tensor host = torch::from_blob(
      owned->data(), sizes, [owned](void*) { delete owned; }, torch::TensorOptions().dtype(type));
  return device.is_cpu() ? host : host.to(device);
}

torch::Tensor ToTensor(std::vector<int64_t> values, std::vector<int64_t> sizes,
                       torch::Device device) {
  return ToTensor(std::move(values), std::move(sizes), torch::kInt64, device);
}

torch::Tensor ToMask(std::vector<uint8_t> values, std::vector<int64_t> sizes,
                     torch::Device device) {
  static_assert(sizeof(bool) == sizeof(uint8_t));
  return ToTensor(std::move(values), std::move(sizes), torch::kBool, device);
}

// Zero-filled rings of `shapes` and element `types` into `rings`: on the CPU outside autograd
// in huge-page regions, one per element type (util/huge_pages.h: a decode step streams the
// rings from memory), anything else one by one with `options` and the ring's type.
void MakeRings(const std::vector<std::vector<int64_t>>& shapes,
               const std::vector<torch::ScalarType>& types,
               const std::vector<torch::Tensor*>& rings, const torch::TensorOptions& options) {
  if (options.device().is_cpu() && !options.requires_grad()) {
    for (torch::ScalarType type : {torch::kFloat32, torch::kFloat16}) {
      std::vector<std::vector<int64_t>> of_type;
      for (size_t b = 0; b < rings.size(); ++b) {
        if (types[b] == type) of_type.push_back(shapes[b]);
      }
      if (of_type.empty()) continue;
      std::vector<torch::Tensor> made = util::ZerosInHugePages(of_type, type);
      for (size_t b = 0, m = 0; b < rings.size(); ++b) {
        if (types[b] == type) *rings[b] = std::move(made[m++]);
      }
    }
  }
  for (size_t b = 0; b < rings.size(); ++b) {
    if (!rings[b]->defined()) *rings[b] = torch::zeros(shapes[b], options.dtype(types[b]));
  }
}

}  // namespace

SessionMemory SessionMemory::Create(const MemoryShape& shape,
                                    const torch::TensorOptions& options) {
  SessionMemory memory;
  memory.shape_ = shape;
  memory.device_ = options.device();
  memory.dtype_ = c10::typeMetaToScalarType(options.dtype());
  // Zero-filled, not empty: masked slots get probability 0, and 0 * NaN would still be NaN.
  // Every ring is listed first and made at the end, together (MakeRings).
  memory.layers_.resize(shape.layers);  // fixed from here: `rings` points into it
  TORCH_CHECK(!shape.half_rings || (options.device().is_cpu() && !options.requires_grad()),
              "float16 rings are for inference on the CPU");
  const torch::ScalarType options_type = c10::typeMetaToScalarType(options.dtype());
  std::vector<std::vector<int64_t>> shapes;
  std::vector<torch::ScalarType> types;
  std::vector<torch::Tensor*> rings;
  auto buffer = [&](int64_t capacity, torch::Tensor& ring, bool attention) {
    shapes.push_back({shape.batch, shape.heads, capacity, shape.d_head});
    types.push_back(attention && shape.half_rings ? torch::kFloat16 : options_type);
    rings.push_back(&ring);
  };
  for (int i = 0; i < shape.layers; ++i) {
    LayerMemory& layer = memory.layers_[i];
    buffer(shape.raw_capacity(), layer.k_raw_, /*attention=*/true);
    buffer(shape.raw_capacity(), layer.v_raw_, /*attention=*/true);
    if (shape.cmem_len > 0) {
      buffer(shape.cmp_capacity(), layer.k_cmp_, /*attention=*/true);
      buffer(shape.cmp_capacity(), layer.v_cmp_, /*attention=*/true);
    }
    if (shape.sink_len > 0) {
      buffer(shape.sink_len, layer.k_sink_, /*attention=*/true);
      buffer(shape.sink_len, layer.v_sink_, /*attention=*/true);
    }
    if (i == shape.knn_layer && shape.knn_capacity() > 0 && shape.knn_store) {
      knn::KnnMemoryConfig config;
      config.heads = shape.heads;
      config.dim = shape.d_head;
      config.capacity = shape.knn_capacity();
      if (shape.knn_exact_threshold > 0) config.exact_threshold = shape.knn_exact_threshold;
      absl::StatusOr<std::unique_ptr<knn::KnnMemory>> store = knn::KnnMemory::Create(config);
      TORCH_CHECK(store.ok(), "kNN memory: ", store.status().ToString());
      layer.knn_store_ = *std::move(store);
    } else if (i == shape.knn_layer && shape.knn_capacity() > 0) {
      buffer(shape.knn_capacity(), layer.k_knn_, /*attention=*/false);
      buffer(shape.knn_capacity(), layer.v_knn_, /*attention=*/false);
    }
  }
  MakeRings(shapes, types, rings, options);
  memory.raw_positions_.assign(shape.raw_capacity(), -1);
  memory.cmp_groups_.assign(shape.cmp_capacity(), -1);
  memory.row_starts_.assign(shape.batch, 0);
  if (shape.knn_capacity() > 0 && !shape.knn_store) {
    memory.knn_slots_ = torch::arange(shape.knn_capacity(), options.dtype(torch::kInt64));
  }
  return memory;
}

namespace {

// Pointers to one memory's pieces, in ForEachPiece's order, by type (C: const or not).
template <typename C>
struct PieceRefs {
  template <typename T>
  using Ref = std::conditional_t<std::is_const_v<C>, const T*, T*>;
  std::vector<Ref<torch::Tensor>> rings;
  std::vector<Ref<std::unique_ptr<knn::KnnMemory>>> stores;
  std::vector<Ref<std::vector<int64_t>>> vectors;
  std::vector<Ref<int64_t>> counters;

  template <typename Kind, typename T>
  void operator()(Kind, const char*, int, T& piece) {
    using Piece = std::remove_const_t<T>;
    if constexpr (std::is_same_v<Piece, torch::Tensor>) rings.push_back(&piece);
    if constexpr (std::is_same_v<Piece, std::unique_ptr<knn::KnnMemory>>) stores.push_back(&piece);
    if constexpr (std::is_same_v<Piece, std::vector<int64_t>>) vectors.push_back(&piece);
    if constexpr (std::is_same_v<Piece, int64_t>) counters.push_back(&piece);
  }
};

}  // namespace

SessionMemory SessionMemory::Clone() const {
  TORCH_CHECK(!write_open_, "Clone: a SegmentWrite is open on this memory");
  SessionMemory copy;
  copy.shape_ = shape_;
  copy.device_ = device_;
  copy.dtype_ = dtype_;
  copy.knn_slots_ = knn_slots_;  // immutable
  copy.torn_ = torn_;
  copy.layers_.resize(layers_.size());  // fixed from here: `to` points into it
  // The same walk over both memories lists the same pieces in the same order.
  PieceRefs<const SessionMemory> from;
  PieceRefs<SessionMemory> to;
  ForEachPiece(from);
  copy.ForEachPiece(to);
  for (size_t i = 0; i < from.vectors.size(); ++i) *to.vectors[i] = *from.vectors[i];
  for (size_t i = 0; i < from.counters.size(); ++i) *to.counters[i] = *from.counters[i];
  for (size_t i = 0; i < from.stores.size(); ++i) {
    if (*from.stores[i] != nullptr) *to.stores[i] = (*from.stores[i])->Clone();
  }
  std::vector<const torch::Tensor*> sources;
  std::vector<torch::Tensor*> targets;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<torch::ScalarType> types;
  // Every ring float32 or float16 on the CPU outside autograd: made as Create makes them.
  bool host = true;
  for (size_t r = 0; r < from.rings.size(); ++r) {
    const torch::Tensor& ring = *from.rings[r];
    if (!ring.defined()) continue;
    sources.push_back(&ring);
    targets.push_back(to.rings[r]);
    shapes.push_back(ring.sizes().vec());
    types.push_back(ring.scalar_type());
    host = host && ring.device().is_cpu() && !ring.requires_grad() &&
           (types.back() == torch::kFloat32 || types.back() == torch::kFloat16);
  }
  if (host) {
    MakeRings(shapes, types, targets, torch::TensorOptions());
    for (size_t b = 0; b < sources.size(); ++b) targets[b]->copy_(*sources[b]);
  } else {
    for (size_t b = 0; b < sources.size(); ++b) *targets[b] = sources[b]->clone();
  }
  return copy;
}

void SessionMemory::Detach() {
  ForEachPiece([](PieceKind, const char*, int, auto& piece) {
    if constexpr (std::is_same_v<std::decay_t<decltype(piece)>, torch::Tensor>) {
      if (piece.defined()) piece = piece.detach();
    }
  });
}

void SessionMemory::Clear() {
  TORCH_CHECK(!write_open_, "Clear: a SegmentWrite is open on this memory");
  Detach();
  // Model::NewMemory makes inference tensors, which change in place only in inference mode.
  c10::InferenceMode inference;
  // Position p lives in slot p % capacity of each ring, group g in compressed slot g % capacity:
  // only slots below the furthest planned end can have been written.
  const int64_t groups =
      shape_.cmem_rate > 0 ? (planned_end_ + shape_.cmem_rate - 1) / shape_.cmem_rate : 0;
  const int64_t written = planned_end_;
  ForEachPiece([&](PieceKind kind, const char*, int, auto& piece) {
    using Piece = std::decay_t<decltype(piece)>;
    if constexpr (std::is_same_v<Piece, torch::Tensor>) {
      const int64_t slots = kind == PieceKind::kCompressedRing ? groups : written;
      if (piece.defined() && slots > 0) piece.narrow(2, 0, std::min(slots, piece.size(2))).zero_();
    } else if constexpr (std::is_same_v<Piece, std::unique_ptr<knn::KnnMemory>>) {
      if (piece != nullptr) {
        absl::StatusOr<std::unique_ptr<knn::KnnMemory>> store =
            knn::KnnMemory::Create(piece->config());
        TORCH_CHECK(store.ok(), "kNN memory: ", store.status().ToString());
        piece = *std::move(store);
      }
    } else if constexpr (std::is_same_v<Piece, std::vector<int64_t>>) {
      // Slot maps empty (-1), document starts at 0.
      std::fill(piece.begin(), piece.end(), kind == PieceKind::kSlotMap ? -1 : 0);
    } else {
      piece = 0;  // counters (planned_end_ among them: last, once its value was used above)
    }
  });
  torn_ = false;
}

void SessionMemory::ResetRow(int row) {
  TORCH_CHECK(!shape_.knn_store, "ResetRow: a kNN store holds one sequence; use a dense ring");
  row_starts_[row] = next_position_;
}

SegmentPlan SessionMemory::Plan(int64_t length) const {
  const int64_t s0 = next_position_;
  const int64_t raw_cap = shape_.raw_capacity();
  const int64_t cmp_cap = shape_.cmp_capacity();
  const int64_t mem_len = shape_.mem_len;
  const int64_t rate = shape_.cmem_rate;
  const int64_t max_distance = shape_.max_distance;
  // One mask row per batch row only when some row started a document later than the others.
  const bool per_row = std::any_of(row_starts_.begin(), row_starts_.end(),
                                   [&](int64_t s) { return s != row_starts_[0]; });
  const int64_t rows = per_row ? shape_.batch : 1;

  SegmentPlan plan;
  plan.start = s0;
  plan.length = length;

  // Raw ring: position p lives in slot p % raw_capacity.
  plan.raw_positions_after = raw_positions_;
  std::vector<int64_t> write_slots(length);
  for (int64_t i = 0; i < length; ++i) {
    const int64_t p = s0 + i;
    write_slots[i] = p % raw_cap;
    plan.raw_positions_after[p % raw_cap] = p;
  }
  std::vector<uint8_t> raw_mask(rows * length * raw_cap);
  std::vector<int64_t> raw_distance(length * raw_cap);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row_start = row_starts_[r];
    for (int64_t s = 0; s < length; ++s) {
      const int64_t t = s0 + s;
      for (int64_t j = 0; j < raw_cap; ++j) {
        const int64_t p = plan.raw_positions_after[j];
        raw_mask[(r * length + s) * raw_cap + j] =
            p >= row_start && p <= t && p >= t - mem_len;
        if (r == 0) raw_distance[s * raw_cap + j] = std::clamp<int64_t>(t - p, 0, max_distance);
      }
    }
  }
  plan.raw_write_slots = ToTensor(std::move(write_slots), {length}, device_);
  plan.raw_mask = ToMask(std::move(raw_mask), {rows, 1, length, raw_cap}, device_);
  plan.raw_distance = ToTensor(std::move(raw_distance), {length, raw_cap}, device_);

  plan.cmp_groups_after = cmp_groups_;
  if (shape_.cmem_len > 0) {
    // Groups are formed late and in batches (see segment_plan.h): every group due by the end of
    // this segment, plus up to kGroupsAhead complete ones after it, once any group is due.
    const int64_t end = s0 + length;
    int64_t first_group = 0;  // groups form in order: the next one is the newest formed + 1
    for (int64_t g : cmp_groups_) first_group = std::max(first_group, g + 1);
    const int64_t complete = end / rate;
    const int64_t due = end - 1 - mem_len >= 0 ? (end - 1 - mem_len) / rate + 1 : 0;
    int64_t end_group = first_group;  // exclusive
    if (std::min(due, complete) > first_group) {
      end_group = std::min(complete, std::max(due, first_group) + kGroupsAhead);
    }
    plan.new_groups = end_group - first_group;
    plan.cmp_filled_after = std::min<int64_t>(end_group, cmp_cap);
    std::vector<int64_t> source_slots;
    std::vector<int64_t> cmp_slots;
    for (int64_t g = first_group; g < end_group; ++g) {
      for (int64_t p = g * rate; p < (g + 1) * rate; ++p) source_slots.push_back(p % raw_cap);
      cmp_slots.push_back(g % cmp_cap);
      plan.cmp_groups_after[g % cmp_cap] = g;
    }
    const int64_t sources = static_cast<int64_t>(source_slots.size());
    plan.group_source_slots = ToTensor(std::move(source_slots), {sources}, device_);
    plan.cmp_write_slots = ToTensor(std::move(cmp_slots), {plan.new_groups}, device_);

    std::vector<uint8_t> cmp_mask(rows * length * cmp_cap);
    std::vector<int64_t> cmp_distance(length * cmp_cap);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t row_start = row_starts_[r];
      for (int64_t s = 0; s < length; ++s) {
        const int64_t t = s0 + s;
        const int64_t horizon = t - mem_len;  // groups must end before this position
        const int64_t oldest = (horizon >= 0 ? horizon / rate : 0) - shape_.cmem_len;
        for (int64_t j = 0; j < cmp_cap; ++j) {
          const int64_t g = plan.cmp_groups_after[j];
          cmp_mask[(r * length + s) * cmp_cap + j] = g >= 0 && g * rate >= row_start &&
                                                     (g + 1) * rate <= horizon && g >= oldest;
          if (r == 0) {
            cmp_distance[s * cmp_cap + j] =
                std::clamp<int64_t>(t - ((g + 1) * rate - 1), 0, max_distance);
          }
        }
      }
    }
    plan.cmp_mask = ToMask(std::move(cmp_mask), {rows, 1, length, cmp_cap}, device_);
    plan.cmp_distance = ToTensor(std::move(cmp_distance), {length, cmp_cap}, device_);
  }

  const int64_t knn_cap = shape_.knn_capacity();
  if (knn_cap > 0 && !shape_.knn_store) {
    // Every position enters the kNN ring (slot p % capacity) as it arrives; it becomes
    // retrievable once it leaves the query's raw window. Computed on the device: O(capacity).
    plan.knn_write_slots = torch::arange(s0, s0 + length, knn_slots_.options()).remainder(knn_cap);
    const int64_t last = s0 + length - 1;
    // Position held by each slot after the write: the newest p <= last with p = slot (mod cap).
    torch::Tensor held = last - (last - knn_slots_).remainder(knn_cap);  // [cap]
    torch::Tensor t = torch::arange(s0, s0 + length, knn_slots_.options()).view({1, 1, length, 1});
    std::vector<int64_t> starts(row_starts_.begin(), row_starts_.begin() + rows);
    torch::Tensor row_start = ToTensor(std::move(starts), {rows, 1, 1, 1}, device_);
    torch::Tensor lower = torch::max(t - mem_len - shape_.knn_len, row_start);
    plan.knn_mask = held.ge(0) & held.ge(lower) & held.lt(t - mem_len);  // [R, 1, S, cap]
  } else if (knn_cap > 0) {
    // The store searches by position: query t may retrieve [t - mem_len - knn_len, t - mem_len).
    std::vector<int64_t> hi(length), lo(length);
    for (int64_t i = 0; i < length; ++i) {
      hi[i] = s0 - mem_len + i;
      lo[i] = hi[i] - shape_.knn_len;
    }
    plan.knn_hi = ToTensor(std::move(hi), {length}, torch::kCPU);
    plan.knn_lo = ToTensor(std::move(lo), {length}, torch::kCPU);
  }
  return plan;
}

SegmentWrite SessionMemory::BeginWrite(int64_t length) { return BeginWrite(Plan(length)); }

SegmentWrite SessionMemory::BeginWrite(SegmentPlan plan) {
  TORCH_CHECK(!write_open_, "BeginWrite: another SegmentWrite is open on this memory");
  TORCH_CHECK(!torn_, "BeginWrite: the memory is torn (an abandoned write had appended to its "
              "kNN store); Clear it");
  TORCH_CHECK(plan.start == next_position_, "BeginWrite: the plan starts at ", plan.start,
              ", the memory at ", next_position_);
  // Before any byte is written, so that Clear zeroes what an abandoned write leaves.
  planned_end_ = std::max(planned_end_, plan.start + plan.length);
  write_open_ = true;
  return SegmentWrite(*this, std::move(plan));
}

void SessionMemory::Commit(SegmentPlan& plan) {
  raw_positions_ = std::move(plan.raw_positions_after);
  cmp_groups_ = std::move(plan.cmp_groups_after);
  next_position_ = plan.start + plan.length;
}

int64_t SessionMemory::xl_tokens() const {
  return std::min<int64_t>(next_position_ - row0_start(), shape_.mem_len);
}

int64_t SessionMemory::compressed_slots() const {
  if (shape_.cmem_len == 0) return 0;
  const int64_t horizon = next_position_ - row0_start() - shape_.mem_len;
  const int64_t formed = horizon > 0 ? horizon / shape_.cmem_rate : 0;
  return std::min<int64_t>(formed, shape_.cmem_len);
}

int64_t SessionMemory::knn_entries() const {
  if (shape_.knn_capacity() == 0) return 0;
  const int64_t left_window = next_position_ - row0_start() - shape_.mem_len;
  return std::clamp<int64_t>(left_window, 0, shape_.knn_len);
}

int64_t SessionMemory::bytes() const {
  int64_t total = 0;
  ForEachPiece([&](PieceKind, const char*, int, const auto& piece) {
    using Piece = std::decay_t<decltype(piece)>;
    if constexpr (std::is_same_v<Piece, torch::Tensor>) {
      if (piece.defined()) total += piece.numel() * piece.element_size();
    } else if constexpr (std::is_same_v<Piece, std::unique_ptr<knn::KnnMemory>>) {
      if (piece != nullptr) total += piece->bytes();
    }
  });
  return total;
}

}  // namespace mnemo::memory
