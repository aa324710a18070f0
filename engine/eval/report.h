// EvalReport: everything one mnemo-eval run measured, and its renderings (Markdown, JSON).
//
// A plain value: the Evaluator's results plus what is needed to reproduce the run (model,
// data, flags). Rendering is pure (string in memory); WriteReportFiles does the I/O.
#ifndef MNEMO_ENGINE_EVAL_REPORT_H_
#define MNEMO_ENGINE_EVAL_REPORT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/eval/evaluator.h"
#include "engine/eval/passkey.h"
#include "engine/model/model_config.h"

namespace mnemo::eval {

struct EvalReport {
  // Provenance.
  std::string command;      // the mnemo-eval command line
  std::string started_utc;  // ISO 8601
  double seconds = 0.0;     // whole run
  int threads = 0;          // LibTorch intra-op threads
  int chunk = 0;            // tokens per Forward call

  // Model.
  std::string model_dir;
  model::ModelConfig config;
  int64_t parameters = 0;

  // Data.
  std::string data_source;  // the --data / --data_list / split.json it came from
  int64_t min_bytes = 0;
  int64_t max_bytes_per_file = 0;  // 0 = whole files
  std::vector<std::string> files;
  std::vector<int64_t> file_bytes;  // bytes scored per file

  // Results. `modes` keeps skipped modes too (their skip_reason set, totals empty).
  std::vector<ModeResult> modes;
  std::vector<ExitResult> exits;  // full depth first, then thresholds as given
  std::string exit_memory;        // which memory the exit rows used
  std::vector<PasskeyResult> passkey;

  std::vector<std::string> notes;  // anything the reader should know (skips, caveats)
};

// One issue-3 target line. kInfo lines state a number with no bar to meet.
struct TargetCheck {
  enum class State { kMet, kNotMet, kNotRun, kInfo };
  std::string target;  // the wording
  State state = State::kNotRun;
  std::string detail;  // the numbers behind the verdict
};

// Evaluates the issue-3 targets against `report` (prints, never asserts).
std::vector<TargetCheck> CheckTargets(const EvalReport& report);
const char* TargetStateName(TargetCheck::State state);

// The run's results; `rows` of memory modes that ran, in ladder order. nullptr when absent.
const ModeResult* FindMode(const EvalReport& report, const std::string& key);
// The deepest memory mode that ran (the "full memory" of target 1), or nullptr.
const ModeResult* FullMemoryMode(const EvalReport& report);
const ExitResult* FullDepthExit(const EvalReport& report);

std::string RenderMarkdown(const EvalReport& report);
std::string RenderJson(const EvalReport& report);

// Writes OUT/eval.md, OUT/eval.json and the plot data (see plot.h), creating OUT.
absl::Status WriteReportFiles(const EvalReport& report, const std::string& out_dir);

// Creates OUT and writes each {file name, text} into it (every report writer's last step).
absl::Status WriteTextFiles(const std::string& out_dir,
                            absl::Span<const std::pair<std::string, std::string>> files);

}  // namespace mnemo::eval

#endif  // MNEMO_ENGINE_EVAL_REPORT_H_
