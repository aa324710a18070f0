#include "engine/training/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace mnemo::training {

Progress::Progress(std::string label, std::FILE* out, std::chrono::seconds log_every)
    : label_(std::move(label)),
      out_(out),
      interactive_(::isatty(::fileno(out)) != 0),
      log_every_(log_every),
      start_(std::chrono::steady_clock::now()),
      last_print_(start_) {}

double Progress::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string Progress::FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

void Progress::Update(double fraction, const std::string& detail) {
  const auto now = std::chrono::steady_clock::now();
  if (!interactive_ && printed_ && now - last_print_ < log_every_) return;
  fraction = std::clamp(fraction, 0.0, 1.0);
  const double elapsed = elapsed_seconds();
  const double eta = fraction > 0 ? elapsed * (1 - fraction) / fraction : NAN;
  constexpr int kWidth = 24;
  const int filled = static_cast<int>(fraction * kWidth);
  const std::string bar = std::string(filled, '#') + std::string(kWidth - filled, '-');
  const std::string line = absl::StrFormat("%s [%s] %5.1f%% | %s | elapsed %s | ETA %s", label_,
                                           bar, 100 * fraction, detail,
                                           FormatDuration(elapsed), FormatDuration(eta));
  if (interactive_) {
    std::fprintf(out_, "\r\033[K%s", line.c_str());
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
  last_print_ = now;
  printed_ = true;
}

void Progress::Finish(const std::string& detail) {
  const std::string line = absl::StrFormat("%s done | %s | %s", label_, detail,
                                           FormatDuration(elapsed_seconds()));
  std::fprintf(out_, interactive_ ? "\r\033[K%s\n" : "%s\n", line.c_str());
  std::fflush(out_);
}

}  // namespace mnemo::training
