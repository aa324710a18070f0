#include "engine/model/batch_decoder.h"

#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "engine/util/status_macros.h"

namespace mnemo::model {
namespace {

ActiveRows AllRows(int64_t batch, const torch::Device& device) {
  ActiveRows active;
  active.rows.resize(batch);
  for (int64_t r = 0; r < batch; ++r) active.rows[r] = r;
  active.index = torch::arange(batch, torch::TensorOptions().dtype(torch::kInt64).device(device));
  active.all = true;
  return active;
}

ActiveRows Subset(std::vector<int64_t> rows, const torch::Device& device) {
  ActiveRows active;
  active.rows = std::move(rows);
  active.index = torch::tensor(active.rows, torch::kInt64).to(device);
  active.all = false;
  return active;
}

}  // namespace

BatchDecoder::BatchDecoder(Model& model, BatchDecoderOptions options)
    : model_(model), options_(options) {}

absl::Status BatchDecoder::Validate(absl::Span<const DecodeRow> rows) const {
  const ModelConfig& c = model_.config();
  if (rows.empty()) return absl::InvalidArgumentError("a decode step needs at least one row");
  std::unordered_set<const memory::SessionMemory*> seen;
  for (size_t r = 0; r < rows.size(); ++r) {
    const DecodeRow& row = rows[r];
    if (row.token < 0 || row.token >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("row ", r, ": token id ", row.token,
                                                     " is outside the vocabulary [0, ",
                                                     c.vocab_size, ")"));
    }
    if (std::isnan(row.exit_threshold)) {
      return absl::InvalidArgumentError(absl::StrCat("row ", r, ": exit threshold is NaN"));
    }
    if (row.memory == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("row ", r, ": memory is null"));
    }
    if (!seen.insert(row.memory).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("row ", r, ": its memory is already another row's in this step"));
    }
    const memory::MemoryShape& s = row.memory->shape();
    if (s.batch != 1 || s.layers != c.n_layers || s.heads != c.n_heads || s.d_head != c.d_head ||
        s.seg_len != c.seg_len || s.mem_len != c.mem_len || s.max_distance != c.MaxDistance() ||
        row.memory->num_layers() != c.n_layers) {
      return absl::InvalidArgumentError(absl::StrCat(
          "row ", r, ": memory does not come from this model's NewMemory (batch ", s.batch,
          ", layers ", s.layers, ", heads ", s.heads, ", mem_len ", s.mem_len, ")"));
    }
    if (row.memory->layer(0).k_raw.device() != model_.device()) {
      return absl::InvalidArgumentError(absl::StrCat("row ", r, ": memory is on ",
                                                     row.memory->layer(0).k_raw.device().str(),
                                                     ", the model on ", model_.device().str()));
    }
    if (c.knn_layer >= 0 && row.memory->layer(c.knn_layer).k_knn.defined()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "row ", r, ": memory has a training kNN ring; decode needs an inference memory"));
    }
  }
  return absl::OkStatus();
}

DecodeRows BatchDecoder::Prepare(absl::Span<const DecodeRow> rows) const {
  const ModelConfig& c = model_.config();
  DecodeRows state;
  state.layout = options_.layout;
  const int64_t batch = static_cast<int64_t>(rows.size());
  const int64_t masked = model_.transformer()->sinusoid().size(0);  // the -inf column
  std::vector<torch::Tensor> raw_index(batch), cmp_index(batch);    // full capacity
  for (int64_t r = 0; r < batch; ++r) {
    memory::SessionMemory& m = *rows[r].memory;
    state.memories.push_back(&m);
    state.plans.push_back(m.Plan(1));
    const memory::SegmentPlan& plan = state.plans.back();
    const memory::MemoryShape& s = m.shape();
    // Positions start at 0 and slot = position % capacity, so the filled slots are a prefix.
    const int64_t t = plan.start;
    state.raw_filled.push_back(std::min<int64_t>(t + 1, s.raw_capacity()));
    const bool cmp = s.cmem_len > 0;
    state.cmp_filled.push_back(cmp ? std::min<int64_t>((t + 1) / s.cmem_rate, s.cmp_capacity()) : 0);
    if (state.layout == AttentionLayout::kPadded) {
      // [raw_capacity]: distance where visible, the -inf column elsewhere.
      raw_index[r] = plan.raw_distance.view(-1).masked_fill(plan.raw_mask.view(-1).logical_not(), masked);
      if (cmp) {
        cmp_index[r] = plan.cmp_distance.view(-1).masked_fill(plan.cmp_mask.view(-1).logical_not(), masked);
      }
    }
  }
  if (state.layout == AttentionLayout::kPerRow) {
    for (int64_t r = 0; r < batch; ++r) {
      const memory::SegmentPlan& plan = state.plans[r];
      std::vector<RingSpan> spans;
      std::vector<int64_t> distances;
      // Runs of visible slots in the plan's masks (a window of positions or of groups is at
      // most two runs of a ring), with their distances.
      auto add_runs = [&](const torch::Tensor& mask, const torch::Tensor& distance, bool compressed) {
        torch::Tensor m = mask.view(-1).to(torch::kCPU).contiguous();           // [capacity]
        torch::Tensor d = distance.view(-1).to(torch::kCPU).contiguous();
        const bool* visible = m.data_ptr<bool>();
        const int64_t* dist = d.data_ptr<int64_t>();
        for (int64_t j = 0, n = m.size(0); j < n; ++j) {
          if (!visible[j]) continue;
          if (spans.empty() || spans.back().compressed != compressed ||
              spans.back().start + spans.back().length != j) {
            spans.push_back(RingSpan{compressed, j, 0});
          }
          ++spans.back().length;
          distances.push_back(dist[j]);
        }
      };
      add_runs(plan.raw_mask, plan.raw_distance, false);
      if (rows[r].memory->shape().cmem_len > 0) add_runs(plan.cmp_mask, plan.cmp_distance, true);
      const int64_t width = static_cast<int64_t>(distances.size());
      state.row_index.push_back(torch::tensor(distances, torch::kInt64)
                                    .to(model_.device())
                                    .view({1, 1, width})
                                    .expand({c.n_heads, 1, width}));
      state.spans.push_back(std::move(spans));
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
      state.padded_zeros = torch::zeros({1, c.n_heads, state.padded_cmp, c.d_head},
                                        rows[0].memory->layer(0).k_raw.options());
    }
  }
  return state;
}

absl::StatusOr<DecodeBatchResult> BatchDecoder::Step(absl::Span<const DecodeRow> rows) {
  MNEMO_RETURN_IF_ERROR(Validate(rows));
  try {
    c10::InferenceMode inference;
    TransformerImpl& net = *model_.transformer();
    const torch::Device device = model_.device();
    const int layers = net.num_layers();
    const int64_t batch = static_cast<int64_t>(rows.size());
    DecodeRows state = Prepare(rows);

    std::vector<int64_t> ids;
    bool want_keys = false;
    for (const DecodeRow& row : rows) {
      ids.push_back(row.token);
      want_keys = want_keys || row.knn_lm_key;
    }
    torch::Tensor h = net.Embed(torch::tensor(ids, torch::kInt64).to(device));  // [B, d]
    DecodeBatchResult result;
    result.exit_layers.assign(batch, layers);
    ActiveRows active = AllRows(batch, device);
    for (int i = 0; i < layers; ++i) {
      const bool last = i + 1 == layers;
      torch::Tensor ffn_input;  // [A, d]
      torch::Tensor before;  // [A, d], the layer's input (saturation measure only)
      if (options_.measure == ExitMeasure::kHiddenSaturation) {
        before = active.all ? h : h.index_select(0, active.index);
      }
      torch::Tensor out = net.block(i)->Decode(h, i, state, active, net.sinusoid(),
                                               last && want_keys ? &ffn_input : nullptr);
      if (active.rows.empty()) continue;  // keys/values only, for exited rows
      h = active.all ? out : h.index_copy(0, active.index, out);
      if (last) {
        if (want_keys) {
          result.knn_lm_keys = torch::zeros({batch, h.size(1)}, h.options())
                                   .index_copy_(0, active.index, ffn_input)
                                   .to(torch::kCPU, torch::kFloat32);
        }
        break;
      }
      const bool any_eligible = std::any_of(active.rows.begin(), active.rows.end(), [&](int64_t r) {
        return rows[r].exit_threshold <= 1.0f && !rows[r].knn_lm_key;
      });
      if (!any_eligible) continue;
      torch::Tensor confidence;  // [A]
      if (options_.measure == ExitMeasure::kSoftmaxResponse) {
        torch::Tensor top2 = std::get<0>(torch::softmax(net.Logits(out), -1).topk(2, -1));
        confidence = top2.select(-1, 0) - top2.select(-1, 1);
      } else {
        confidence = torch::cosine_similarity(out, before, /*dim=*/1);
      }
      confidence = confidence.to(torch::kCPU, torch::kFloat32).contiguous();
      const float* conf = confidence.data_ptr<float>();
      std::vector<int64_t> staying;
      for (size_t a = 0; a < active.rows.size(); ++a) {
        const DecodeRow& row = rows[active.rows[a]];
        if (!row.knn_lm_key && conf[a] >= row.exit_threshold) {
          result.exit_layers[active.rows[a]] = i + 1;
        } else {
          staying.push_back(active.rows[a]);
        }
      }
      if (staying.size() != active.rows.size()) active = Subset(std::move(staying), device);
    }
    for (int64_t r = 0; r < batch; ++r) state.memories[r]->Commit(state.plans[r]);
    // Each row's final hidden state is its exit state: one head pass for all rows.
    result.logprobs = torch::log_softmax(net.Logits(h), -1).to(torch::kCPU, torch::kFloat32);
    return result;
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("batched decode step failed: ", e.what_without_backtrace()));
  }
}

}  // namespace mnemo::model
