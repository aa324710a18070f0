// Plot: mnemo-bench's PNG, drawn by gnuplot with scripts/plot_bench.gp.
//
// WritePlot writes whitespace-separated data files into a temporary directory, runs
//   gnuplot -e "dir='TMP'; out='PNG'; mode='level'|'sweep'" scripts/plot_bench.gp
// and removes the directory. One level: latency CDFs (TTFT, ITL), output tokens/s over time and
// the exit-layer histogram. Several levels (a sweep): output tokens/s against streams with the
// linear-scaling line, and TTFT/ITL percentiles against streams.
#ifndef MNEMO_CLIENTS_CPP_BENCH_PLOT_H_
#define MNEMO_CLIENTS_CPP_BENCH_PLOT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "clients/cpp/bench/level_result.h"

namespace mnemo::bench {

// The source tree's scripts/plot_bench.gp ("" when this binary was built without one).
std::string DefaultPlotScript();

// FAILED_PRECONDITION when gnuplot or the script is missing, INVALID_ARGUMENT for a path
// gnuplot cannot quote, INTERNAL when gnuplot fails or writes no PNG.
absl::Status WritePlot(const std::vector<LevelResult>& levels, const std::string& title,
                       const std::string& png_path, const std::string& script);

}  // namespace mnemo::bench

#endif  // MNEMO_CLIENTS_CPP_BENCH_PLOT_H_
