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
                             AttentionLayout layout, int64_t max_distance) {
  DecodeRows state;
  state.layout = layout;
  const int64_t batch = static_cast<int64_t>(memories.size());
  const torch::Tensor& ring = memories[0]->layer(0).k_raw;
  const torch::Device device = ring.device();
  state.host = layout == AttentionLayout::kPerRow && HostAttentionReads(ring);
  const int64_t masked = max_distance + 1;  // the -inf column (padded layout)
  std::vector<torch::Tensor> raw_index(batch), cmp_index(batch);  // full capacity
  for (int64_t r = 0; r < batch; ++r) {
    memory::SessionMemory& m = *memories[r];
    state.memories.push_back(&m);
    state.plans.push_back(m.Plan(1));
    const memory::SegmentPlan& plan = state.plans.back();
    const memory::MemoryShape& s = m.shape();
    // Positions start at 0 and slot = position % capacity, so the filled slots are a prefix.
    const int64_t t = plan.start;
    state.raw_filled.push_back(std::min<int64_t>(t + 1, s.raw_capacity()));
    const bool cmp = s.cmem_len > 0;
    state.cmp_filled.push_back(cmp ? plan.cmp_filled_after : 0);
    if (layout == AttentionLayout::kPadded) {
      // [raw_capacity]: distance where visible, the -inf column elsewhere.
      raw_index[r] = plan.raw_distance.view(-1).masked_fill(plan.raw_mask.view(-1).logical_not(), masked);
      if (cmp) {
        cmp_index[r] = plan.cmp_distance.view(-1).masked_fill(plan.cmp_mask.view(-1).logical_not(), masked);
      }
    }
  }
  if (layout != AttentionLayout::kPadded) {
    for (int64_t r = 0; r < batch; ++r) {
      const memory::SegmentPlan& plan = state.plans[r];
      std::vector<RingSpan> spans;
      std::vector<int64_t> distances;
      AddRuns(plan.raw_mask, plan.raw_distance, /*compressed=*/false, spans, distances);
      if (memories[r]->shape().cmem_len > 0) {
        AddRuns(plan.cmp_mask, plan.cmp_distance, /*compressed=*/true, spans, distances);
      }
      if (!state.host) {
        const int64_t width = static_cast<int64_t>(distances.size());
        const int64_t heads = memories[r]->shape().heads;
        state.row_index.push_back(torch::tensor(distances, torch::kInt64)
                                      .to(device)
                                      .view({1, 1, width})
                                      .expand({heads, 1, width}));
      }
      state.spans.push_back(std::move(spans));
      state.distances.push_back(std::move(distances));
    }
  } else {
    state.padded_raw = *std::max_element(state.raw_filled.begin(), state.raw_filled.end());
    state.padded_cmp = *std::max_element(state.cmp_filled.begin(), state.cmp_filled.end());
    std::vector<torch::Tensor> padded;
    for (int64_t r = 0; r < batch; ++r) {
      torch::Tensor index = raw_index[r].narrow(0, 0, state.padded_raw);
      if (state.padded_cmp > 0) {
        torch::Tensor cmp = cmp_index[r].defined()
                                ? cmp_index[r].narrow(0, 0, state.padded_cmp)
                                : torch::full({state.padded_cmp}, masked, index.options());
        index = torch::cat({index, cmp});
      }
      padded.push_back(index);
    }
    state.padded_index = torch::stack(padded, 0).view({batch, 1, 1, -1});
    if (state.padded_cmp > 0) {
      const memory::MemoryShape& s = memories[0]->shape();
      state.padded_zeros = torch::zeros({1, s.heads, state.padded_cmp, s.d_head},
                                        ring.options().dtype(torch::kFloat32));
    }
  }
  return state;
}

}  // namespace mnemo::model
