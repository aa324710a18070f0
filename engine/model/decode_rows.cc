#include "engine/model/decode_rows.h"

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

DecodeRows PrepareDecodeRows(absl::Span<memory::SessionMemory* const> memories,
                             AttentionLayout layout) {
  DecodeRows state;
  state.layout = layout;
  const int64_t batch = static_cast<int64_t>(memories.size());
  const torch::Tensor& ring = memories[0]->layer(0).k_raw;
  const torch::Device device = ring.device();
  state.host = layout == AttentionLayout::kPerRow && HostAttentionReads(ring);
  for (int64_t r = 0; r < batch; ++r) {
    memory::SessionMemory& m = *memories[r];
    state.memories.push_back(&m);
    state.plans.push_back(m.Plan(1));
    const memory::SegmentPlan& plan = state.plans.back();
    std::vector<RingSpan> spans;
    std::vector<int64_t> distances;
    AddRuns(plan.raw_mask, plan.raw_distance, /*compressed=*/false, spans, distances);
    if (m.shape().cmem_len > 0) {
      AddRuns(plan.cmp_mask, plan.cmp_distance, /*compressed=*/true, spans, distances);
    }
    if (!state.host) {
      const int64_t width = static_cast<int64_t>(distances.size());
      const int64_t heads = m.shape().heads;
      state.row_index.push_back(torch::tensor(distances, torch::kInt64)
                                    .to(device)
                                    .view({1, 1, width})
                                    .expand({heads, 1, width}));
    }
    state.spans.push_back(std::move(spans));
    state.distances.push_back(std::move(distances));
  }
  return state;
}

}  // namespace mnemo::model
