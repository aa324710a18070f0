#include "engine/model/decode_step_state.h"

#include <algorithm>

#include "engine/model/host_attention.h"

namespace mnemo::model {
namespace {

// AppendVisibleRuns over a decode row's masks ([1, 1, 1, capacity] and [1, capacity]).
void AddRuns(const torch::Tensor& mask, const torch::Tensor& distance, bool compressed,
             std::vector<RingSpan>& spans, std::vector<int64_t>& distances) {
  torch::Tensor m = mask.view(-1).to(torch::kCPU).contiguous();  // [capacity]
  torch::Tensor d = distance.view(-1).to(torch::kCPU).contiguous();
  AppendVisibleRuns(m.data_ptr<bool>(), d.data_ptr<int64_t>(), m.size(0), compressed, spans,
                    distances);
}

}  // namespace

void AppendVisibleRuns(const bool* visible, const int64_t* distance, int64_t slots,
                       bool compressed, std::vector<RingSpan>& spans,
                       std::vector<int64_t>& distances) {
  for (int64_t j = 0; j < slots; ++j) {
    if (!visible[j]) continue;
    if (spans.empty() || spans.back().compressed != compressed ||
        spans.back().start + spans.back().length != j) {
      spans.push_back(RingSpan{compressed, j, 0});
    }
    ++spans.back().length;
    distances.push_back(distance[j]);
  }
}

DecodeStepState BeginDecodeStep(absl::Span<memory::SessionMemory* const> memories,
                                AttentionLayout layout) {
  DecodeStepState state;
  state.layout = layout;
  const int64_t batch = static_cast<int64_t>(memories.size());
  state.host =
      layout == AttentionLayout::kPerRow && HostAttentionReads(memories[0]->layer(0).k_raw());
  state.writes.reserve(batch);
  for (int64_t r = 0; r < batch; ++r) {
    memory::SessionMemory& m = *memories[r];
    state.writes.push_back(m.BeginWrite(1));
    if (!state.host) continue;
    const memory::SegmentPlan& plan = state.writes.back().plan();
    std::vector<RingSpan> spans;
    std::vector<int64_t> distances;
    AddRuns(plan.raw_mask, plan.raw_distance, /*compressed=*/false, spans, distances);
    if (m.shape().cmem_len > 0) {
      AddRuns(plan.cmp_mask, plan.cmp_distance, /*compressed=*/true, spans, distances);
    }
    state.spans.push_back(std::move(spans));
    state.distances.push_back(std::move(distances));
  }
  return state;
}

}  // namespace mnemo::model
