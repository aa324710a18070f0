#include "tools/decode_bench/latency.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace mnemo::tools {

Latency Summarise(std::vector<double> samples) {
  Latency out;
  if (samples.empty()) return out;
  std::sort(samples.begin(), samples.end());
  const int n = static_cast<int>(samples.size());
  auto rank = [&](double p) {
    const int i = static_cast<int>(std::ceil(p * n)) - 1;
    return samples[std::clamp(i, 0, n - 1)];
  };
  out.count = n;
  out.p50 = rank(0.5);
  out.p90 = rank(0.9);
  out.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / n;
  return out;
}

}  // namespace mnemo::tools
