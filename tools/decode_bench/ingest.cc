#include "tools/decode_bench/ingest.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/util/status_macros.h"

namespace mnemo::tools {
namespace {

using Clock = std::chrono::steady_clock;

std::string Duration(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, (s / 60) % 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

}  // namespace

absl::StatusOr<double> Ingest(model::Model& model, memory::SessionMemory& memory,
                              TextSource& text, int64_t target, const IngestOptions& options) {
  const int64_t begin = memory.next_position();
  if (begin >= target) return 0.0;
  const auto start = Clock::now();
  auto last_report = start;
  while (memory.next_position() < target) {
    const int64_t n = std::min(options.chunk, target - memory.next_position());
    const std::vector<int> tokens = text.Next(n);
    MNEMO_RETURN_IF_ERROR(model.Forward(tokens, memory, model::Outputs::kLast).status());
    const auto now = Clock::now();
    if (std::chrono::duration<double>(now - last_report).count() >= options.progress_seconds ||
        memory.next_position() == target) {
      last_report = now;
      const double elapsed = std::chrono::duration<double>(now - start).count();
      const int64_t done = memory.next_position() - begin, total = target - begin;
      const double rate = done / std::max(elapsed, 1e-9);
      std::fprintf(stderr, "[%s] ingest %lld/%lld tokens (%.1f%%), %.0f tok/s, elapsed %s, ETA %s\n",
                   options.label.c_str(), static_cast<long long>(memory.next_position()),
                   static_cast<long long>(target), 100.0 * done / total, rate,
                   Duration(elapsed).c_str(), Duration((total - done) / rate).c_str());
    }
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace mnemo::tools
