#include "engine/eval/evaluator.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mnemo::eval {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::string FormatEntries(int64_t entries) {
  if (entries >= (1 << 20) && entries % (1 << 20) == 0) return absl::StrCat(entries >> 20, "M");
  if (entries >= 1024 && entries % 1024 == 0) return absl::StrCat(entries >> 10, "K");
  return absl::StrCat(entries);
}

std::vector<MemoryMode> PlanMemoryModes(const model::ModelConfig& config,
                                        const std::vector<int>& knn_sizes) {
  std::vector<MemoryMode> modes;
  MemoryMode none;
  none.key = "none";
  none.label = "no memory";
  none.no_memory = true;
  none.options = {/*compressive=*/false, /*knn=*/false, /*knn_mem_len=*/0};
  modes.push_back(none);

  MemoryMode xl;
  xl.key = "xl";
  xl.label = "XL memory";
  xl.options = {/*compressive=*/false, /*knn=*/false, /*knn_mem_len=*/0};
  modes.push_back(xl);

  const bool has_cmem = config.cmem_len > 0;
  MemoryMode cmem;
  cmem.key = "xl_cmem";
  cmem.label = "XL + compressive";
  cmem.options = {/*compressive=*/true, /*knn=*/false, /*knn_mem_len=*/0};
  if (!has_cmem) cmem.skip_reason = "model has no compressive memory (cmem_len = 0)";
  modes.push_back(cmem);

  for (int size : knn_sizes) {
    MemoryMode knn;
    knn.key = absl::StrCat(has_cmem ? "xl_cmem_knn_" : "xl_knn_", size);
    knn.label = absl::StrCat(has_cmem ? "XL + compressive + kNN " : "XL + kNN ",
                             FormatEntries(size));
    knn.options = {/*compressive=*/true, /*knn=*/true, /*knn_mem_len=*/size};
    if (config.knn_layer < 0) knn.skip_reason = "model has no kNN layer (knn_layer = -1)";
    modes.push_back(knn);
  }
  return modes;
}

Evaluator::Evaluator(model::Model& model, const std::vector<Document>& documents, int chunk,
                     ProgressMeter* progress)
    : model_(model), documents_(documents), chunk_(chunk), progress_(progress) {}

void Evaluator::Stage(const std::string& what, size_t index, size_t count) {
  if (progress_ != nullptr) {
    progress_->SetStage(absl::StrFormat("%s | file %d/%d", what, index + 1, count));
  }
}

ScoreOptions Evaluator::MakeScoreOptions() {
  ScoreOptions options;
  options.chunk = chunk_;
  if (progress_ != nullptr) {
    options.on_progress = [this](int64_t bytes) { progress_->Advance(bytes); };
  }
  return options;
}

absl::StatusOr<ModeResult> Evaluator::RunMemoryMode(const MemoryMode& mode) {
  if (!mode.skip_reason.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(mode.label, ": ", mode.skip_reason));
  }
  const auto start = std::chrono::steady_clock::now();
  ModeResult result;
  result.mode = mode;
  const ScoreOptions options = MakeScoreOptions();
  for (size_t i = 0; i < documents_.size(); ++i) {
    Stage(mode.label, i, documents_.size());
    absl::StatusOr<ScoreTotals> totals =
        mode.no_memory ? ScoreWithoutMemory(model_, documents_[i].bytes, options)
                       : ScoreWithMemory(model_, mode.options, documents_[i].bytes, options);
    if (!totals.ok()) {
      return absl::Status(totals.status().code(),
                          absl::StrCat(mode.label, " on ", documents_[i].path, ": ",
                                       totals.status().message()));
    }
    result.file_bpb.push_back(totals->Bpb());
    result.totals.Add(*totals);
  }
  result.seconds = SecondsSince(start);
  return result;
}

absl::StatusOr<ExitResult> Evaluator::RunExit(float threshold,
                                              const model::MemoryOptions& memory) {
  const auto start = std::chrono::steady_clock::now();
  ExitResult result;
  result.threshold = threshold;
  const std::string label =
      result.full_depth() ? std::string("exit full depth") : absl::StrFormat("exit %.2f", threshold);
  const ScoreOptions options = MakeScoreOptions();
  for (size_t i = 0; i < documents_.size(); ++i) {
    Stage(label, i, documents_.size());
    absl::StatusOr<ScoreTotals> totals =
        ScoreWithExit(model_, memory, threshold, documents_[i].bytes, options);
    if (!totals.ok()) {
      return absl::Status(totals.status().code(), absl::StrCat(label, " on ", documents_[i].path,
                                                               ": ", totals.status().message()));
    }
    result.totals.Add(*totals);
  }
  result.seconds = SecondsSince(start);
  return result;
}

absl::StatusOr<PasskeyResult> Evaluator::RunPasskey(int64_t distance, bool knn, int seeds) {
  const auto start = std::chrono::steady_clock::now();
  PasskeyResult result;
  result.distance = distance;
  result.knn = knn;
  result.knn_mem_len = knn ? KnnMemLenFor(distance) : 0;
  const model::MemoryOptions memory{/*compressive=*/true, /*knn=*/knn,
                                    /*knn_mem_len=*/result.knn_mem_len};
  PasskeyOptions options;
  options.chunk = chunk_;
  if (progress_ != nullptr) {
    options.on_progress = [this](int64_t bytes) { progress_->Advance(bytes); };
  }
  for (int seed = 0; seed < seeds; ++seed) {
    if (progress_ != nullptr) {
      progress_->SetStage(absl::StrFormat("passkey %s kNN %s | seed %d/%d",
                                          FormatEntries(distance), knn ? "on" : "off", seed + 1,
                                          seeds));
    }
    absl::StatusOr<PasskeyDocument> doc =
        BuildPasskeyDocument(documents_, distance, static_cast<uint64_t>(seed));
    if (!doc.ok()) return doc.status();
    absl::StatusOr<std::string> generated =
        GreedyContinue(model_, memory, doc->text, kPasskeyDigits, options);
    if (!generated.ok()) return generated.status();
    result.trials++;
    if (*generated == doc->digits) result.correct++;
    for (int d = 0; d < kPasskeyDigits; ++d) {
      if (static_cast<size_t>(d) < generated->size() && (*generated)[d] == doc->digits[d]) {
        result.digits_correct++;
      }
    }
    result.expected.push_back(doc->digits);
    result.outputs.push_back(*generated);
  }
  result.seconds = SecondsSince(start);
  return result;
}

}  // namespace mnemo::eval
