#include "engine/eval/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace mnemo::eval {

ProgressMeter::ProgressMeter(int64_t total_units, std::FILE* sink, double line_interval_s)
    : total_(total_units),
      sink_(sink),
      terminal_(sink != nullptr && isatty(fileno(sink))),
      line_interval_s_(line_interval_s),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

void ProgressMeter::SetStage(std::string stage) {
  stage_ = std::move(stage);
  Draw(/*force=*/terminal_);
}

void ProgressMeter::Advance(int64_t units) {
  done_ += units;
  Draw(/*force=*/false);
}

void ProgressMeter::Log(const std::string& line) {
  if (sink_ == nullptr) return;
  std::fprintf(sink_, "%s%s\n", terminal_ ? "\r\033[K" : "", line.c_str());
  Draw(/*force=*/terminal_);
}

void ProgressMeter::Finish() {
  Draw(/*force=*/true);
  if (sink_ != nullptr && terminal_) std::fputc('\n', sink_);
}

double ProgressMeter::ElapsedSeconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string ProgressMeter::FormatDuration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "--";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, (s / 60) % 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

void ProgressMeter::Draw(bool force) {
  if (sink_ == nullptr) return;
  const auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_draw_).count();
  if (!force && since < (terminal_ ? 0.25 : line_interval_s_)) return;
  last_draw_ = now;
  const double elapsed = ElapsedSeconds();
  const double rate = elapsed > 0 ? static_cast<double>(done_) / elapsed : 0.0;
  // Totals are estimates (passkey filler lengths): never show more than 100% or a negative ETA.
  const int64_t left = std::max<int64_t>(0, total_ - done_);
  const double eta = rate > 0 ? static_cast<double>(left) / rate : -1.0;
  const double percent =
      total_ > 0 ? std::min(100.0, 100.0 * static_cast<double>(done_) / total_) : 0.0;
  const std::string line = absl::StrFormat(
      "%s | %.1f/%.1f MB (%.1f%%) | %.0f B/s | elapsed %s | ETA %s", stage_, done_ / 1e6,
      total_ / 1e6, percent, rate, FormatDuration(elapsed), FormatDuration(eta));
  if (terminal_) {
    std::fprintf(sink_, "\r\033[K%s", line.c_str());
  } else {
    std::fprintf(sink_, "%s\n", line.c_str());
  }
  std::fflush(sink_);
}

}  // namespace mnemo::eval
