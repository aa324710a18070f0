#include "engine/eval/scorer.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/model/model_config.h"

namespace mnemo::eval {
namespace {

void Report(const ScoreOptions& options, int64_t bytes) {
  if (options.on_progress) options.on_progress(bytes);
}

absl::Status CheckLogprobs(const torch::Tensor& logprobs, size_t n) {
  if (logprobs.dim() != 2 || logprobs.size(0) != static_cast<int64_t>(n) ||
      logprobs.size(1) < 256) {
    return absl::InternalError(absl::StrCat("model returned log-probs of shape ",
                                            logprobs.dim() == 2 ? logprobs.size(0) : -1,
                                            " rows for ", n, " tokens"));
  }
  return absl::OkStatus();
}

}  // namespace

double ScoreTotals::Bpb() const {
  return bytes == 0 ? 0.0 : -logprob / std::log(2.0) / static_cast<double>(bytes);
}

double ScoreTotals::AvgLayers() const {
  return bytes == 0 ? 0.0 : static_cast<double>(layers) / static_cast<double>(bytes);
}

void ScoreTotals::Add(const ScoreTotals& other) {
  logprob += other.logprob;
  bytes += other.bytes;
  layers += other.layers;
}

std::vector<int> DocumentInputs(std::string_view bytes) {
  std::vector<int> inputs;
  if (bytes.empty()) return inputs;
  inputs.reserve(bytes.size());
  inputs.push_back(model::kBosId);
  for (size_t i = 0; i + 1 < bytes.size(); ++i) {
    inputs.push_back(static_cast<unsigned char>(bytes[i]));
  }
  return inputs;
}

double SumTargetLogprobs(const torch::Tensor& logprobs, std::string_view targets) {
  torch::Tensor lp = logprobs.to(torch::kCPU, torch::kFloat32).contiguous();  // [n, vocab]
  auto a = lp.accessor<float, 2>();
  double sum = 0.0;
  for (size_t i = 0; i < targets.size(); ++i) {
    sum += a[static_cast<int64_t>(i)][static_cast<unsigned char>(targets[i])];
  }
  return sum;
}

absl::StatusOr<ScoreTotals> ScoreWithMemory(model::Model& model,
                                            const model::MemoryOptions& memory_options,
                                            std::string_view document,
                                            const ScoreOptions& options) {
  const std::vector<int> inputs = DocumentInputs(document);
  memory::SessionMemory memory = model.NewMemory(memory_options);
  const size_t chunk = static_cast<size_t>(std::max(1, options.chunk));
  ScoreTotals totals;
  for (size_t start = 0; start < inputs.size(); start += chunk) {
    const size_t n = std::min(chunk, inputs.size() - start);
    absl::StatusOr<torch::Tensor> logprobs =  // [n, vocab]
        model.Forward(absl::MakeConstSpan(inputs).subspan(start, n), memory,
                      model::Outputs::kAll);
    if (!logprobs.ok()) return logprobs.status();
    if (absl::Status s = CheckLogprobs(*logprobs, n); !s.ok()) return s;
    totals.logprob += SumTargetLogprobs(*logprobs, document.substr(start, n));
    totals.bytes += static_cast<int64_t>(n);
    Report(options, static_cast<int64_t>(n));
  }
  totals.layers = totals.bytes * model.config().n_layers;
  return totals;
}

absl::StatusOr<ScoreTotals> ScoreWithoutMemory(model::Model& model, std::string_view document,
                                               const ScoreOptions& options) {
  const size_t seg_len = static_cast<size_t>(std::max(1, model.config().seg_len));
  const model::MemoryOptions no_extras{/*compressive=*/false, /*knn=*/false, /*knn_mem_len=*/0};
  ScoreTotals totals;
  int64_t unreported = 0;
  for (size_t start = 0; start < document.size(); start += seg_len) {
    const std::string_view segment = document.substr(start, seg_len);
    const std::vector<int> inputs = DocumentInputs(segment);
    memory::SessionMemory memory = model.NewMemory(no_extras);  // fresh for every segment
    absl::StatusOr<torch::Tensor> logprobs =  // [segment, vocab]
        model.Forward(inputs, memory, model::Outputs::kAll);
    if (!logprobs.ok()) return logprobs.status();
    if (absl::Status s = CheckLogprobs(*logprobs, inputs.size()); !s.ok()) return s;
    totals.logprob += SumTargetLogprobs(*logprobs, segment);
    totals.bytes += static_cast<int64_t>(segment.size());
    unreported += static_cast<int64_t>(segment.size());
    if (unreported >= options.chunk || start + seg_len >= document.size()) {
      Report(options, unreported);
      unreported = 0;
    }
  }
  totals.layers = totals.bytes * model.config().n_layers;
  return totals;
}

absl::StatusOr<ScoreTotals> ScoreWithExit(model::Model& model,
                                          const model::MemoryOptions& memory_options,
                                          float threshold, std::string_view document,
                                          const ScoreOptions& options) {
  const std::vector<int> inputs = DocumentInputs(document);
  memory::SessionMemory memory = model.NewMemory(memory_options);
  const size_t chunk = static_cast<size_t>(std::max(1, options.chunk));
  ScoreTotals totals;
  for (size_t start = 0; start < inputs.size(); start += chunk) {
    const size_t n = std::min(chunk, inputs.size() - start);
    absl::StatusOr<model::ExitForward> out =
        model.ForwardWithExit(absl::MakeConstSpan(inputs).subspan(start, n), memory, threshold);
    if (!out.ok()) return out.status();
    if (absl::Status s = CheckLogprobs(out->logprobs, n); !s.ok()) return s;
    if (out->exit_layers.size() != n) {
      return absl::InternalError(absl::StrCat("ForwardWithExit returned ", out->exit_layers.size(),
                                              " exit layers for ", n, " tokens"));
    }
    totals.logprob += SumTargetLogprobs(out->logprobs, document.substr(start, n));
    for (int layer : out->exit_layers) totals.layers += layer;
    totals.bytes += static_cast<int64_t>(n);
    Report(options, static_cast<int64_t>(n));
  }
  return totals;
}

}  // namespace mnemo::eval
