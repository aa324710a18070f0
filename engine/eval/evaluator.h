// Evaluator: runs the issue-3 evaluation passes of one model over a held-out corpus.
//
// Each pass is one memory mode (or one early-exit threshold) over every document, one
// document at a time, with a fresh memory per document (memory never crosses files). The
// Evaluator borrows the model, the documents and the progress meter; all three must outlive
// it. Not thread-safe (the model is not).
#ifndef MNEMO_ENGINE_EVAL_EVALUATOR_H_
#define MNEMO_ENGINE_EVAL_EVALUATOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/eval/corpus.h"
#include "engine/eval/passkey.h"
#include "engine/eval/progress.h"
#include "engine/eval/scorer.h"
#include "engine/model/model.h"

namespace mnemo::eval {

// One row of the memory table.
struct MemoryMode {
  std::string key;    // stable id for JSON: "none", "xl", "xl_cmem", "xl_cmem_knn_4096"
  std::string label;  // table text: "no memory", "XL memory", "XL + compressive + kNN 4K"
  bool no_memory = false;        // segments scored alone (ScoreWithoutMemory)
  model::MemoryOptions options;  // otherwise: the session memory switches
  std::string skip_reason;       // non-empty: the model cannot run this mode
};

// The issue-3 ladder: no memory, XL, XL + compressive, XL + compressive + kNN at each size.
// Modes the model cannot run (no compressed memory, no kNN layer) carry a skip_reason.
std::vector<MemoryMode> PlanMemoryModes(const model::ModelConfig& config,
                                        const std::vector<int>& knn_sizes);

// "4K", "64K", "1M", or the plain number when not a multiple of 1024.
std::string FormatEntries(int64_t entries);

struct ModeResult {
  MemoryMode mode;
  ScoreTotals totals;
  std::vector<double> file_bpb;  // [documents], same order as the corpus
  double seconds = 0.0;
};

// threshold > 1 is the full-depth row.
struct ExitResult {
  float threshold = 2.0f;
  ScoreTotals totals;
  double seconds = 0.0;
  bool full_depth() const { return threshold > 1.0f; }
};

class Evaluator {
 public:
  // `progress` may be null. `chunk` = tokens per Forward call.
  Evaluator(model::Model& model, const std::vector<Document>& documents, int chunk,
            ProgressMeter* progress);

  // Runs `mode` over every document. The mode must not be skipped.
  absl::StatusOr<ModeResult> RunMemoryMode(const MemoryMode& mode);

  // Early exit at `threshold` over every document with `memory` (the full memory by default).
  absl::StatusOr<ExitResult> RunExit(float threshold, const model::MemoryOptions& memory = {});

  // `seeds` passkey trials at `distance` with the model's compressed memory and kNN memory
  // on (sized by KnnMemLenFor) or off. Filler text comes from the evaluator's documents.
  absl::StatusOr<PasskeyResult> RunPasskey(int64_t distance, bool knn, int seeds);

 private:
  void Stage(const std::string& what, size_t index, size_t count);
  ScoreOptions MakeScoreOptions();

  model::Model& model_;
  const std::vector<Document>& documents_;
  const int chunk_;
  ProgressMeter* const progress_;  // may be null
};

}  // namespace mnemo::eval

#endif  // MNEMO_ENGINE_EVAL_EVALUATOR_H_
