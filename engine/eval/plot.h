// Plot data for scripts/plot_eval.gp and a runner for it (gnuplot, PNG output).
//
// mnemo-eval writes two whitespace-separated data files beside eval.md; the gnuplot script
// turns them into eval_memory.png (bar: bpb per memory mode) and eval_exit.png (line: average
// layers vs bpb per exit threshold). The script can be rerun by hand:
//   gnuplot -e "dir='docs/results'" scripts/plot_eval.gp
#ifndef MNEMO_ENGINE_EVAL_PLOT_H_
#define MNEMO_ENGINE_EVAL_PLOT_H_

#include <string>

#include "absl/status/status.h"

namespace mnemo::eval {

struct EvalReport;

inline constexpr char kMemoryPlotData[] = "eval_memory.dat";
inline constexpr char kExitPlotData[] = "eval_exit.dat";

// `"label" bpb` per memory mode that ran, in ladder order.
std::string MemoryPlotData(const EvalReport& report);
// `"label" avg_layers bpb` per exit row, by increasing average layers.
std::string ExitPlotData(const EvalReport& report);

// scripts/plot_eval.gp of the source tree this binary was built from ("" if unknown).
std::string DefaultPlotScript();

// Runs `gnuplot -e "dir='OUT'" SCRIPT`. FAILED_PRECONDITION when gnuplot is not installed or
// the script is missing; INTERNAL when gnuplot fails.
absl::Status RunPlotScript(const std::string& script, const std::string& out_dir);

}  // namespace mnemo::eval

#endif  // MNEMO_ENGINE_EVAL_PLOT_H_
