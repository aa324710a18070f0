#include "engine/memory/session_memory.h"

#include <algorithm>

namespace mnemo::memory {
namespace {

torch::Tensor ToTensor(std::vector<int64_t>& values, std::vector<int64_t> sizes,
                       torch::Device device) {
  return torch::from_blob(values.data(), sizes, torch::kInt64).to(device, /*non_blocking=*/false,
                                                                    /*copy=*/true);
}

torch::Tensor ToMask(std::vector<uint8_t>& values, std::vector<int64_t> sizes,
                     torch::Device device) {
  return torch::from_blob(values.data(), sizes, torch::kBool).to(device, false, true);
}

}  // namespace

SessionMemory SessionMemory::Create(const MemoryShape& shape,
                                    const torch::TensorOptions& options) {
  SessionMemory memory;
  memory.shape_ = shape;
  memory.device_ = options.device();
  // Zero-filled, not empty: masked slots get probability 0, and 0 * NaN would still be NaN.
  const std::vector<int64_t> raw = {shape.batch, shape.heads, shape.raw_capacity(), shape.d_head};
  const std::vector<int64_t> cmp = {shape.batch, shape.heads, shape.cmp_capacity(), shape.d_head};
  for (int i = 0; i < shape.layers; ++i) {
    LayerMemory layer;
    layer.k_raw = torch::zeros(raw, options);
    layer.v_raw = torch::zeros(raw, options);
    if (shape.cmem_len > 0) {
      layer.k_cmp = torch::zeros(cmp, options);
      layer.v_cmp = torch::zeros(cmp, options);
    }
    memory.layers_.push_back(std::move(layer));
  }
  memory.raw_positions_.assign(shape.raw_capacity(), -1);
  memory.cmp_groups_.assign(shape.cmp_capacity(), -1);
  return memory;
}

SessionMemory SessionMemory::Clone() const {
  SessionMemory copy;
  copy.shape_ = shape_;
  copy.device_ = device_;
  copy.raw_positions_ = raw_positions_;
  copy.cmp_groups_ = cmp_groups_;
  copy.next_position_ = next_position_;
  for (const LayerMemory& layer : layers_) {
    LayerMemory c;
    c.k_raw = layer.k_raw.clone();
    c.v_raw = layer.v_raw.clone();
    if (layer.k_cmp.defined()) {
      c.k_cmp = layer.k_cmp.clone();
      c.v_cmp = layer.v_cmp.clone();
    }
    copy.layers_.push_back(std::move(c));
  }
  return copy;
}

void SessionMemory::Detach() {
  for (LayerMemory& layer : layers_) {
    for (torch::Tensor* t : {&layer.k_raw, &layer.v_raw, &layer.k_cmp, &layer.v_cmp}) {
      if (t->defined()) *t = t->detach();
    }
  }
}

SegmentPlan SessionMemory::Plan(int64_t length) const {
  const int64_t s0 = next_position_;
  const int64_t raw_cap = shape_.raw_capacity();
  const int64_t cmp_cap = shape_.cmp_capacity();
  const int64_t mem_len = shape_.mem_len;
  const int64_t rate = shape_.cmem_rate;
  const int64_t max_distance = shape_.max_distance;

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
  std::vector<uint8_t> raw_mask(length * raw_cap);
  std::vector<int64_t> raw_distance(length * raw_cap);
  for (int64_t s = 0; s < length; ++s) {
    const int64_t t = s0 + s;
    for (int64_t j = 0; j < raw_cap; ++j) {
      const int64_t p = plan.raw_positions_after[j];
      raw_mask[s * raw_cap + j] = p >= 0 && p <= t && p >= t - mem_len;
      raw_distance[s * raw_cap + j] = std::clamp<int64_t>(t - p, 0, max_distance);
    }
  }
  plan.raw_write_slots = ToTensor(write_slots, {length}, device_);
  plan.raw_mask = ToMask(raw_mask, {length, raw_cap}, device_);
  plan.raw_distance = ToTensor(raw_distance, {length, raw_cap}, device_);

  plan.cmp_groups_after = cmp_groups_;
  if (shape_.cmem_len == 0) return plan;

  // Groups whose last position (g + 1) * rate - 1 falls inside this segment are formed now.
  const int64_t first_group = s0 / rate;
  const int64_t end_group = (s0 + length) / rate;  // exclusive
  plan.new_groups = std::max<int64_t>(0, end_group - first_group);
  std::vector<int64_t> source_slots;
  std::vector<int64_t> cmp_slots;
  for (int64_t g = first_group; g < end_group; ++g) {
    for (int64_t p = g * rate; p < (g + 1) * rate; ++p) source_slots.push_back(p % raw_cap);
    cmp_slots.push_back(g % cmp_cap);
    plan.cmp_groups_after[g % cmp_cap] = g;
  }
  plan.group_source_slots =
      ToTensor(source_slots, {static_cast<int64_t>(source_slots.size())}, device_);
  plan.cmp_write_slots = ToTensor(cmp_slots, {plan.new_groups}, device_);

  std::vector<uint8_t> cmp_mask(length * cmp_cap);
  std::vector<int64_t> cmp_distance(length * cmp_cap);
  for (int64_t s = 0; s < length; ++s) {
    const int64_t t = s0 + s;
    const int64_t horizon = t - mem_len;  // groups must end before this position
    const int64_t oldest = (horizon >= 0 ? horizon / rate : 0) - shape_.cmem_len;
    for (int64_t j = 0; j < cmp_cap; ++j) {
      const int64_t g = plan.cmp_groups_after[j];
      cmp_mask[s * cmp_cap + j] = g >= 0 && (g + 1) * rate <= horizon && g >= oldest;
      cmp_distance[s * cmp_cap + j] =
          std::clamp<int64_t>(t - ((g + 1) * rate - 1), 0, max_distance);
    }
  }
  plan.cmp_mask = ToMask(cmp_mask, {length, cmp_cap}, device_);
  plan.cmp_distance = ToTensor(cmp_distance, {length, cmp_cap}, device_);
  return plan;
}

void SessionMemory::Commit(SegmentPlan& plan) {
  raw_positions_ = std::move(plan.raw_positions_after);
  cmp_groups_ = std::move(plan.cmp_groups_after);
  next_position_ = plan.start + plan.length;
}

int64_t SessionMemory::xl_tokens() const {
  return std::min<int64_t>(next_position_, shape_.mem_len);
}

int64_t SessionMemory::compressed_slots() const {
  if (shape_.cmem_len == 0) return 0;
  const int64_t horizon = next_position_ - shape_.mem_len;
  const int64_t formed = horizon > 0 ? horizon / shape_.cmem_rate : 0;
  return std::min<int64_t>(formed, shape_.cmem_len);
}

int64_t SessionMemory::bytes() const {
  int64_t total = 0;
  for (const LayerMemory& layer : layers_) total += layer.bytes();
  return total;
}

}  // namespace mnemo::memory
