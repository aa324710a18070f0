#include "engine/memory/segment_write.h"

#include <c10/util/Exception.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "engine/memory/session_memory.h"

namespace mnemo::memory {
namespace {

// [1, H, S, dh] -> [S, H, dh] float32 CPU contiguous: a kNN store's rows.
torch::Tensor StoreRows(const torch::Tensor& t) {
  return t[0].transpose(0, 1).to(torch::kCPU, torch::kFloat32).contiguous();
}

// ring[0, :, slot, :] = the rows for a host float32 or float16 ring [1, H, capacity, dh]: what
// index_copy_ does (with .to(kHalf) for a float16 ring: the same rounding), without the ops.
void WriteHostSlot(const float* source, int64_t head_stride, int64_t slot,
                   LayerWrite::HalfConverter to_half, const torch::Tensor& ring) {
  TORCH_CHECK(ring.is_contiguous() && ring.device().is_cpu() && ring.size(0) == 1,
              "host ring write needs a contiguous batch-1 ring on the CPU");
  const int64_t heads = ring.size(1), capacity = ring.size(2), dh = ring.size(3);
  if (ring.scalar_type() == torch::kFloat16) {
    auto* target = reinterpret_cast<uint16_t*>(ring.data_ptr<at::Half>());
    for (int64_t h = 0; h < heads; ++h) {
      to_half(source + h * head_stride, target + (h * capacity + slot) * dh, dh);
    }
    return;
  }
  float* target = ring.data_ptr<float>();
  for (int64_t h = 0; h < heads; ++h) {
    std::memcpy(target + (h * capacity + slot) * dh, source + h * head_stride, dh * sizeof(float));
  }
}

}  // namespace

const LayerMemory& LayerWrite::memory() const { return write_->memory().layer(layer_); }

const SegmentPlan& LayerWrite::plan() const { return write_->plan(); }

LayerMemory& LayerWrite::mutable_memory() const {
  TORCH_CHECK(write_->open(), "a SegmentWrite that was committed or abandoned cannot write");
  return write_->memory_->layers_[layer_];
}

void LayerWrite::WriteRaw(const torch::Tensor& k, const torch::Tensor& v) {
  LayerMemory& m = mutable_memory();
  const torch::Tensor& slots = plan().raw_write_slots;
  // A no-op .to() for rings of the keys' own type; float16 rings round here.
  m.k_raw_.index_copy_(2, slots, k.to(m.k_raw_.scalar_type()));
  m.v_raw_.index_copy_(2, slots, v.to(m.v_raw_.scalar_type()));
  // Sinks: positions below sink_len also go to their own slot (position p in slot p).
  const int64_t start = plan().start;
  if (m.k_sink_.defined() && start < m.k_sink_.size(2)) {
    const int64_t n = std::min<int64_t>(plan().length, m.k_sink_.size(2) - start);
    m.k_sink_.narrow(2, start, n).copy_(k.narrow(2, 0, n));
    m.v_sink_.narrow(2, start, n).copy_(v.narrow(2, 0, n));
  }
}

void LayerWrite::WriteRawPosition(const float* k, const float* v, int64_t head_stride,
                                  HalfConverter to_half) {
  LayerMemory& m = mutable_memory();
  TORCH_CHECK(plan().length == 1, "WriteRawPosition writes one-position segments");
  const int64_t slot = plan().raw_write_slots.data_ptr<int64_t>()[0];
  WriteHostSlot(k, head_stride, slot, to_half, m.k_raw_);
  WriteHostSlot(v, head_stride, slot, to_half, m.v_raw_);
  if (m.k_sink_.defined() && plan().start < m.k_sink_.size(2)) {
    WriteHostSlot(k, head_stride, plan().start, to_half, m.k_sink_);
    WriteHostSlot(v, head_stride, plan().start, to_half, m.v_sink_);
  }
}

void LayerWrite::WriteCompressed(const torch::Tensor& k, const torch::Tensor& v) {
  LayerMemory& m = mutable_memory();
  TORCH_CHECK(m.k_cmp_.defined(), "WriteCompressed: the memory has no compressed rings");
  const torch::Tensor& slots = plan().cmp_write_slots;
  m.k_cmp_.index_copy_(2, slots, k.to(m.k_cmp_.scalar_type()));
  m.v_cmp_.index_copy_(2, slots, v.to(m.v_cmp_.scalar_type()));
}

void LayerWrite::AppendKnn(const torch::Tensor& kn, const torch::Tensor& v) {
  LayerMemory& m = mutable_memory();
  torch::NoGradGuard no_grad;  // no gradient reaches the kNN memory
  if (m.knn_store_ == nullptr) {
    TORCH_CHECK(m.k_knn_.defined(), "AppendKnn: the layer has no kNN memory");
    m.k_knn_.index_copy_(2, plan().knn_write_slots, kn.detach());
    m.v_knn_.index_copy_(2, plan().knn_write_slots, v.detach());
    return;
  }
  TORCH_CHECK(kn.size(0) == 1, "a kNN store serves batch 1, got ", kn.size(0));
  TORCH_CHECK(m.knn_store_->next_position() == plan().start, "kNN store is at position ",
              m.knn_store_->next_position(), " but the segment starts at ", plan().start);
  write_->knn_store_appended_ = true;  // from here an abandon cannot undo the write
  absl::Status appended = m.knn_store_->Append(StoreRows(kn), StoreRows(v));
  TORCH_CHECK(appended.ok(), "kNN store: ", appended.ToString());
}

void LayerWrite::AppendKnnPosition(const float* kn, const float* v) {
  LayerMemory& m = mutable_memory();
  TORCH_CHECK(m.knn_store_ != nullptr, "AppendKnnPosition: the layer has no kNN store");
  TORCH_CHECK(m.knn_store_->next_position() == plan().start, "kNN store is at position ",
              m.knn_store_->next_position(), " but the row is at ", plan().start);
  write_->knn_store_appended_ = true;
  absl::Status appended = m.knn_store_->AppendOne(kn, v);
  TORCH_CHECK(appended.ok(), "kNN store: ", appended.ToString());
}

SegmentWrite::SegmentWrite(SessionMemory& memory, SegmentPlan plan)
    : memory_(&memory), plan_(std::move(plan)) {}

SegmentWrite::SegmentWrite(SegmentWrite&& other) noexcept
    : memory_(std::exchange(other.memory_, nullptr)),
      plan_(std::move(other.plan_)),
      closed_(other.closed_),
      knn_store_appended_(other.knn_store_appended_) {}

SegmentWrite& SegmentWrite::operator=(SegmentWrite&& other) noexcept {
  if (this != &other) {
    if (open()) Abandon();
    memory_ = std::exchange(other.memory_, nullptr);
    plan_ = std::move(other.plan_);
    closed_ = other.closed_;
    knn_store_appended_ = other.knn_store_appended_;
  }
  return *this;
}

SegmentWrite::~SegmentWrite() {
  if (open()) Abandon();
}

void SegmentWrite::Commit() {
  TORCH_CHECK(open(), "Commit: the SegmentWrite is not open");
  memory_->Commit(plan_);
  memory_->write_open_ = false;
  closed_ = true;
}

void SegmentWrite::Abandon() {
  if (!open()) return;
  // The slot maps and next_position were never touched; see the header for the ring bytes.
  if (knn_store_appended_) memory_->torn_ = true;
  memory_->write_open_ = false;
  closed_ = true;
}

}  // namespace mnemo::memory
