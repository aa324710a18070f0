// SessionMemory's durable form (docs/durability.md): the whole memory, and deltas since a Mark.
//
// Whole memory: every piece ForEachPiece lists, in its order, each behind its name and layer so
// that a file made by a differently shaped memory fails on the first piece that differs.
// Delta: the counters and slot maps in full (a few KB), then only the ring slots whose slot map
// entry changed since the mark (every ring write commits a new position or group to its slot),
// the sink rings while they are still filling, and the kNN entries appended since the mark.
#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/memory/session_memory.h"
#include "engine/util/status_macros.h"

namespace mnemo::memory {
namespace {

std::string PieceName(const char* name, int layer) {
  return layer < 0 ? std::string(name) : absl::StrCat("layer ", layer, " ", name);
}

// Slots whose entry differs between `before` and `now` (same length).
std::vector<int64_t> ChangedSlots(const std::vector<int64_t>& before,
                                  const std::vector<int64_t>& now) {
  std::vector<int64_t> changed;
  for (size_t i = 0; i < now.size(); ++i) {
    if (i >= before.size() || before[i] != now[i]) changed.push_back(static_cast<int64_t>(i));
  }
  return changed;
}

torch::Tensor SlotTensor(const std::vector<int64_t>& slots) {
  return torch::from_blob(const_cast<int64_t*>(slots.data()),
                          {static_cast<int64_t>(slots.size())}, torch::kInt64)
      .clone();
}

// A vector read in place of `into`, which keeps its length (slot maps and row starts are sized
// by the memory's shape).
absl::Status ReadSameLength(util::BinaryReader& in, std::vector<int64_t>& into,
                            const std::string& what) {
  MNEMO_ASSIGN_OR_RETURN(std::vector<int64_t> values, in.I64s(what));
  if (values.size() != into.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": the file has ", values.size(), " entries, this memory ",
                     into.size(), " (saved with other memory options or another model)"));
  }
  into = std::move(values);
  return absl::OkStatus();
}

// Positions a memory can have reached. The planner computes with them (p + length, g * rate),
// so a file's counters and slot maps are bounded by it before they are used.
constexpr int64_t kMaxPosition = int64_t{1} << 62;

// DATA_LOSS unless the counters and slot maps describe a memory that was fed `next` positions:
// raw slots empty (-1) or holding an earlier position, compressed slots empty or a group of
// earlier positions, rows starting at fed positions.
absl::Status CheckPositions(int64_t next, int64_t planned, int64_t rate,
                            const std::vector<int64_t>& raw_positions,
                            const std::vector<int64_t>& cmp_groups,
                            const std::vector<int64_t>& row_starts, absl::string_view what) {
  const auto within = [](const std::vector<int64_t>& values, int64_t lo, int64_t hi) {
    return std::all_of(values.begin(), values.end(),
                       [&](int64_t v) { return v >= lo && v <= hi; });
  };
  if (next < 0 || planned < next || planned > kMaxPosition ||
      !within(raw_positions, -1, next - 1) ||
      !within(cmp_groups, -1, next / std::max<int64_t>(rate, 1)) ||
      !within(row_starts, 0, next)) {
    return absl::DataLossError(absl::StrCat(what, ": positions beyond the ", next, " fed"));
  }
  return absl::OkStatus();
}

}  // namespace

void SessionMemory::WriteTo(util::BinaryWriter& out) const {
  TORCH_CHECK(!write_open_, "WriteTo: a SegmentWrite is open on this memory");
  ForEachPiece([&out](PieceKind, const char* name, int layer, const auto& piece) {
    out.Bytes(name);
    out.I64(layer);
    using Piece = std::decay_t<decltype(piece)>;
    if constexpr (std::is_same_v<Piece, torch::Tensor>) {
      out.Tensor(piece);
    } else if constexpr (std::is_same_v<Piece, std::unique_ptr<knn::KnnMemory>>) {
      out.U8(piece != nullptr ? 1 : 0);
      if (piece != nullptr) piece->WriteTo(out);
    } else if constexpr (std::is_same_v<Piece, std::vector<int64_t>>) {
      out.I64s(piece);
    } else {
      out.I64(piece);
    }
  });
}

absl::Status SessionMemory::ReadFrom(util::BinaryReader& in) {
  TORCH_CHECK(!write_open_, "ReadFrom: a SegmentWrite is open on this memory");
  c10::InferenceMode inference;  // the rings may be inference tensors (Model::NewMemory)
  absl::Status status;
  ForEachPiece([&](PieceKind, const char* name, int layer, auto& piece) {
    if (!status.ok()) return;
    status = [&]() -> absl::Status {
      const std::string what = PieceName(name, layer);
      MNEMO_ASSIGN_OR_RETURN(std::string file_name, in.Bytes(what));
      MNEMO_ASSIGN_OR_RETURN(int64_t file_layer, in.I64(what));
      if (file_name != name || file_layer != layer) {
        return absl::FailedPreconditionError(
            absl::StrCat("memory: the file has ", PieceName(file_name.c_str(), file_layer),
                         " where this memory has ", what,
                         " (saved by another model or with other memory options)"));
      }
      using Piece = std::decay_t<decltype(piece)>;
      if constexpr (std::is_same_v<Piece, torch::Tensor>) {
        return in.TensorInto(piece, what);
      } else if constexpr (std::is_same_v<Piece, std::unique_ptr<knn::KnnMemory>>) {
        MNEMO_ASSIGN_OR_RETURN(uint8_t present, in.U8(what));
        if ((present == 1) != (piece != nullptr) || present > 1) {
          return absl::FailedPreconditionError(
              absl::StrCat(what, ": the file ", present == 1 ? "has" : "has no",
                           " kNN store, this memory ", piece != nullptr ? "has" : "has none"));
        }
        return piece != nullptr ? piece->ReadFrom(in) : absl::OkStatus();
      } else if constexpr (std::is_same_v<Piece, std::vector<int64_t>>) {
        return ReadSameLength(in, piece, what);
      } else {
        MNEMO_ASSIGN_OR_RETURN(piece, in.I64(what));
        return piece >= 0 ? absl::OkStatus()
                          : absl::DataLossError(absl::StrCat(what, ": negative"));
      }
    }();
  });
  if (status.ok() && planned_end_ < next_position_) {
    status = absl::DataLossError("memory: planned_end before next_position");
  }
  if (status.ok()) {
    status = CheckPositions(next_position_, planned_end_, shape_.cmem_rate, raw_positions_,
                            cmp_groups_, row_starts_, "memory");
  }
  // Every position fed appended one entry to the kNN store (a memory worth keeping is not torn),
  // and the next write checks that they agree.
  for (const LayerMemory& layer : layers_) {
    if (status.ok() && layer.knn_store_ != nullptr &&
        layer.knn_store_->next_position() != next_position_) {
      status = absl::DataLossError(absl::StrCat("memory: the kNN store is at position ",
                                                layer.knn_store_->next_position(),
                                                ", the memory at ", next_position_));
    }
  }
  return status;
}

SessionMemory::Mark SessionMemory::MarkNow() const {
  Mark mark;
  mark.next_position = next_position_;
  mark.raw_positions = raw_positions_;
  mark.cmp_groups = cmp_groups_;
  for (const LayerMemory& layer : layers_) {
    const knn::KnnMemory* store = layer.knn_store_.get();
    mark.knn_next.push_back(store != nullptr ? store->next_position() : -1);
    mark.knn_ivf.push_back(store != nullptr && store->mode() == knn::KnnMode::kIvf ? 1 : 0);
  }
  return mark;
}

bool SessionMemory::CanDelta(const Mark& mark) const {
  if (write_open_ || torn_ || mark.knn_next.size() != layers_.size() ||
      mark.knn_ivf.size() != layers_.size() ||
      mark.raw_positions.size() != raw_positions_.size() ||
      mark.cmp_groups.size() != cmp_groups_.size() || mark.next_position > next_position_) {
    return false;
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    const knn::KnnMemory* store = layers_[i].knn_store_.get();
    if ((store != nullptr) != (mark.knn_next[i] >= 0)) return false;
    if (store == nullptr) continue;
    const bool ivf = store->mode() == knn::KnnMode::kIvf;
    if (ivf != (mark.knn_ivf[i] == 1) || mark.knn_next[i] < store->oldest_position()) {
      return false;
    }
  }
  return true;
}

void SessionMemory::WriteDeltaSince(const Mark& mark, util::BinaryWriter& out) const {
  TORCH_CHECK(CanDelta(mark), "WriteDeltaSince: check CanDelta first");
  out.I64(next_position_);
  out.I64(planned_end_);
  out.I64s(row_starts_);
  out.I64s(raw_positions_);
  out.I64s(cmp_groups_);
  const std::vector<int64_t> raw = ChangedSlots(mark.raw_positions, raw_positions_);
  const std::vector<int64_t> cmp = ChangedSlots(mark.cmp_groups, cmp_groups_);
  out.I64s(raw);
  out.I64s(cmp);
  const bool sinks_filling = mark.next_position < shape_.sink_len;
  out.U8(sinks_filling ? 1 : 0);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerMemory& layer = layers_[i];
    for (const torch::Tensor* ring : {&layer.k_raw_, &layer.v_raw_}) {
      out.TensorSlots(*ring, 2, raw);
    }
    for (const torch::Tensor* ring : {&layer.k_cmp_, &layer.v_cmp_}) {
      if (ring->defined()) {
        out.TensorSlots(*ring, 2, cmp);
      } else {
        out.Tensor(torch::Tensor());
      }
    }
    for (const torch::Tensor* ring : {&layer.k_sink_, &layer.v_sink_}) {
      out.Tensor(sinks_filling ? *ring : torch::Tensor());
    }
    // The dense kNN ring exists only in training memories: written whole.
    out.Tensor(layer.k_knn_);
    out.Tensor(layer.v_knn_);
    if (layer.knn_store_ != nullptr) {
      auto [keys, values] = layer.knn_store_->EntriesSince(mark.knn_next[i]);
      out.Tensor(keys);
      out.Tensor(values);
      out.I64s(layer.knn_store_->IvfListsSince(mark.knn_next[i]));
    }
  }
}

absl::Status SessionMemory::ApplyDelta(util::BinaryReader& in) {
  TORCH_CHECK(!write_open_, "ApplyDelta: a SegmentWrite is open on this memory");
  c10::InferenceMode inference;  // the rings may be inference tensors (Model::NewMemory)
  MNEMO_ASSIGN_OR_RETURN(const int64_t next, in.I64("delta next_position"));
  MNEMO_ASSIGN_OR_RETURN(const int64_t planned, in.I64("delta planned_end"));
  if (next < next_position_ || planned < next) {
    return absl::DataLossError(absl::StrCat("delta: goes from position ", next_position_, " to ",
                                            next, " (planned ", planned, ")"));
  }
  std::vector<int64_t> row_starts = row_starts_, raw_positions = raw_positions_,
                       cmp_groups = cmp_groups_;
  MNEMO_RETURN_IF_ERROR(ReadSameLength(in, row_starts, "delta row_starts"));
  MNEMO_RETURN_IF_ERROR(ReadSameLength(in, raw_positions, "delta raw_positions"));
  MNEMO_RETURN_IF_ERROR(ReadSameLength(in, cmp_groups, "delta cmp_groups"));
  MNEMO_RETURN_IF_ERROR(CheckPositions(next, planned, shape_.cmem_rate, raw_positions,
                                       cmp_groups, row_starts, "delta"));
  MNEMO_ASSIGN_OR_RETURN(std::vector<int64_t> raw, in.I64s("delta raw slots"));
  MNEMO_ASSIGN_OR_RETURN(std::vector<int64_t> cmp, in.I64s("delta compressed slots"));
  for (int64_t slot : raw) {
    if (slot < 0 || slot >= static_cast<int64_t>(raw_positions_.size())) {
      return absl::DataLossError("delta: raw slot out of range");
    }
  }
  for (int64_t slot : cmp) {
    if (slot < 0 || slot >= static_cast<int64_t>(cmp_groups_.size())) {
      return absl::DataLossError("delta: compressed slot out of range");
    }
  }
  MNEMO_ASSIGN_OR_RETURN(const uint8_t sinks, in.U8("delta sinks"));
  const torch::Tensor raw_slots = SlotTensor(raw), cmp_slots = SlotTensor(cmp);
  // Everything is read and checked before anything changes, so a damaged delta leaves the
  // memory as it was.
  struct Write {
    torch::Tensor* ring;
    torch::Tensor rows;
    const torch::Tensor* slots;  // null: the whole ring
  };
  std::vector<Write> writes;
  struct KnnAppend {
    knn::KnnMemory* store;
    torch::Tensor keys, values;
    std::vector<int64_t> lists;  // IVF lists, head-major; empty in exact mode
  };
  std::vector<KnnAppend> appends;
  for (size_t i = 0; i < layers_.size(); ++i) {
    LayerMemory& layer = layers_[i];
    auto read_rows = [&](torch::Tensor& ring, const torch::Tensor* slots, bool expected,
                         const char* name) -> absl::Status {
      const std::string what = PieceName(name, static_cast<int>(i));
      MNEMO_ASSIGN_OR_RETURN(torch::Tensor rows, in.NewTensor(what));
      if (!expected || !ring.defined()) {
        if (rows.defined()) return absl::DataLossError(absl::StrCat("delta ", what, ": unexpected rows"));
        return absl::OkStatus();
      }
      std::vector<int64_t> shape = ring.sizes().vec();
      if (slots != nullptr) shape[2] = slots->size(0);
      if (!rows.defined() || rows.scalar_type() != ring.scalar_type() ||
          rows.sizes().vec() != shape) {
        return absl::DataLossError(absl::StrCat("delta ", what, ": rows of the wrong shape"));
      }
      writes.push_back({&ring, std::move(rows), slots});
      return absl::OkStatus();
    };
    MNEMO_RETURN_IF_ERROR(read_rows(layer.k_raw_, &raw_slots, true, "k_raw"));
    MNEMO_RETURN_IF_ERROR(read_rows(layer.v_raw_, &raw_slots, true, "v_raw"));
    MNEMO_RETURN_IF_ERROR(read_rows(layer.k_cmp_, &cmp_slots, true, "k_cmp"));
    MNEMO_RETURN_IF_ERROR(read_rows(layer.v_cmp_, &cmp_slots, true, "v_cmp"));
    MNEMO_RETURN_IF_ERROR(read_rows(layer.k_sink_, nullptr, sinks == 1, "k_sink"));
    MNEMO_RETURN_IF_ERROR(read_rows(layer.v_sink_, nullptr, sinks == 1, "v_sink"));
    MNEMO_RETURN_IF_ERROR(read_rows(layer.k_knn_, nullptr, true, "k_knn"));
    MNEMO_RETURN_IF_ERROR(read_rows(layer.v_knn_, nullptr, true, "v_knn"));
    if (layer.knn_store_ != nullptr) {
      const std::string what = PieceName("knn_store", static_cast<int>(i));
      MNEMO_ASSIGN_OR_RETURN(torch::Tensor keys, in.NewTensor(what));
      MNEMO_ASSIGN_OR_RETURN(torch::Tensor values, in.NewTensor(what));
      MNEMO_ASSIGN_OR_RETURN(std::vector<int64_t> lists, in.I64s(what));
      // One entry per position fed since the mark (see ReadFrom).
      if (!keys.defined() || !values.defined() || keys.dim() != 3 ||
          !values.sizes().equals(keys.sizes()) || keys.size(0) != next - next_position_) {
        return absl::DataLossError(absl::StrCat("delta ", what, ": bad entries"));
      }
      appends.push_back({layer.knn_store_.get(), std::move(keys), std::move(values),
                         std::move(lists)});
    }
  }
  for (Write& w : writes) {
    if (w.slots == nullptr) {
      w.ring->copy_(w.rows);
    } else if (w.slots->size(0) > 0) {
      w.ring->index_copy_(2, *w.slots, w.rows);
    }
  }
  for (KnnAppend& a : appends) {
    if (absl::Status s = a.store->AppendAssigned(a.keys, a.values, a.lists); !s.ok()) {
      return absl::DataLossError(absl::StrCat("delta kNN entries: ", s.message()));
    }
  }
  next_position_ = next;
  planned_end_ = planned;
  row_starts_ = std::move(row_starts);
  raw_positions_ = std::move(raw_positions);
  cmp_groups_ = std::move(cmp_groups);
  return absl::OkStatus();
}

}  // namespace mnemo::memory
