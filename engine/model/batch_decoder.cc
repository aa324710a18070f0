#include "engine/model/batch_decoder.h"

#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "engine/model/exit_confidence.h"
#include "engine/model/family.h"
#include "engine/model/exit_rule.h"
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
  const memory::MemoryShape expected = model_.MemoryShapeFor({});
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
    if (absl::Status s = model_.CheckExitMeasure(row.exit_measure); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("row ", r, ": ", s.message()));
    }
    if (row.memory == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("row ", r, ": memory is null"));
    }
    if (!seen.insert(row.memory).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("row ", r, ": its memory is already another row's in this step"));
    }
    if (absl::Status length = model_.CheckLength(row.memory->next_position(), 1); !length.ok()) {
      return absl::Status(length.code(), absl::StrCat("row ", r, ": ", length.message()));
    }
    const memory::MemoryShape& s = row.memory->shape();
    // The sizes every memory of this model shares, whatever its MemoryOptions.
    const memory::MemoryShape& e = expected;
    if (s.batch != 1 || s.layers != e.layers || s.heads != e.heads || s.d_head != e.d_head ||
        s.seg_len != e.seg_len || s.mem_len != e.mem_len || s.max_distance != e.max_distance ||
        row.memory->num_layers() != c.n_layers) {
      return absl::InvalidArgumentError(absl::StrCat(
          "row ", r, ": memory does not come from this model's NewMemory (batch ", s.batch,
          ", layers ", s.layers, ", heads ", s.heads, ", mem_len ", s.mem_len, ")"));
    }
    if (row.memory->layer(0).k_raw().device() != model_.device()) {
      return absl::InvalidArgumentError(absl::StrCat("row ", r, ": memory is on ",
                                                     row.memory->layer(0).k_raw().device().str(),
                                                     ", the model on ", model_.device().str()));
    }
    if (row.memory->torn()) {
      return absl::InvalidArgumentError(
          absl::StrCat("row ", r, ": memory is torn by a failed write; clear or discard it"));
    }
    if (c.knn_layer >= 0 && row.memory->layer(c.knn_layer).k_knn().defined()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "row ", r, ": memory has a training kNN ring; decode needs an inference memory"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<DecodeBatchResult> BatchDecoder::Step(absl::Span<const DecodeRow> rows) {
  MNEMO_RETURN_IF_ERROR(Validate(rows));
  try {
    c10::InferenceMode inference;
    Network& net = model_.network();  // the family's decode pieces (docs/design.md §11)
    const torch::Device device = model_.device();
    const int layers = net.num_layers();
    const int64_t batch = static_cast<int64_t>(rows.size());
    std::vector<memory::SessionMemory*> memories;
    for (const DecodeRow& row : rows) memories.push_back(row.memory);
    DecodeStepState state = BeginDecodeStep(memories, options_.layout);

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
      // The measures some active row may exit on after this layer (none after the last).
      std::array<bool, kExitMeasures.size()> wanted{};
      if (!last) {
        for (int64_t r : active.rows) {
          if (MayExitEarly(rows[r].exit_threshold, rows[r].knn_lm_key)) {
            wanted[static_cast<size_t>(rows[r].exit_measure)] = true;
          }
        }
      }
      torch::Tensor ffn_input;  // [A, d]
      torch::Tensor before;     // [A, d], the layer's input (saturation measure only)
      if (wanted[static_cast<size_t>(ExitMeasure::kHiddenSaturation)]) {
        before = active.all ? h : h.index_select(0, active.index);
      }
      torch::Tensor out =
          net.DecodeLayer(i, h, state, active, last && want_keys ? &ffn_input : nullptr);
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
      if (std::none_of(wanted.begin(), wanted.end(), [](bool w) { return w; })) continue;
      // [measure][A] on the CPU, for the measures wanted.
      std::array<torch::Tensor, kExitMeasures.size()> confidence;
      for (ExitMeasure measure : kExitMeasures) {
        const size_t m = static_cast<size_t>(measure);
        if (!wanted[m]) continue;
        auto head = [&net](const torch::Tensor& hidden) { return net.Logits(hidden); };
        confidence[m] = ExitConfidence(measure, head, model_.exit_classifier(), i, out, before)
                            .to(torch::kCPU, torch::kFloat32)
                            .contiguous();
      }
      std::vector<int64_t> staying;
      for (size_t a = 0; a < active.rows.size(); ++a) {
        const DecodeRow& row = rows[active.rows[a]];
        const size_t m = static_cast<size_t>(row.exit_measure);
        if (!row.knn_lm_key && wanted[m] &&
            ExitsEarly(confidence[m].data_ptr<float>()[a], row.exit_threshold)) {
          result.exit_layers[active.rows[a]] = i + 1;
        } else {
          staying.push_back(active.rows[a]);
        }
      }
      if (staying.size() != active.rows.size()) active = Subset(std::move(staying), device);
    }
    for (memory::SegmentWrite& write : state.writes) write.Commit();
    // Each row's final hidden state is its exit state: one head pass for all rows.
    result.logprobs = torch::log_softmax(net.Logits(h), -1).to(torch::kCPU, torch::kFloat32);
    return result;
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("batched decode step failed: ", e.what_without_backtrace()));
  }
}

}  // namespace mnemo::model
