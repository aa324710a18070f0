// Latency summaries for benchmarks: percentiles and mean of a list of samples.
#ifndef MNEMO_TOOLS_DECODE_BENCH_LATENCY_H_
#define MNEMO_TOOLS_DECODE_BENCH_LATENCY_H_

#include <vector>

namespace mnemo::tools {

struct Latency {
  int count = 0;
  double p50 = 0, p90 = 0, mean = 0;  // same unit as the samples
};

// Nearest-rank percentiles; all zeros for no samples.
Latency Summarise(std::vector<double> samples);

}  // namespace mnemo::tools

#endif  // MNEMO_TOOLS_DECODE_BENCH_LATENCY_H_
