#include "clients/cpp/bench/progress_line.h"

#include <unistd.h>

#include <cstdio>

#include "absl/time/clock.h"

namespace mnemo::bench {

ProgressLine::ProgressLine(bool enabled)
    : enabled_(enabled),
      tty_(isatty(STDERR_FILENO) == 1),
      interval_(tty_ ? absl::Milliseconds(250) : absl::Seconds(1)) {}

void ProgressLine::Update(const std::string& text) {
  if (!enabled_) return;
  const absl::Time now = absl::Now();
  if (now - last_ < interval_) return;
  last_ = now;
  Write(text, /*end_line=*/false);
}

void ProgressLine::Finish(const std::string& text) {
  if (!enabled_) return;
  last_ = absl::Now();
  Write(text, /*end_line=*/true);
}

void ProgressLine::Write(const std::string& text, bool end_line) {
  if (tty_) {
    // Carriage return + erase line, so a shorter line leaves no residue.
    std::fprintf(stderr, "\r\033[K%s%s", text.c_str(), end_line ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s\n", text.c_str());
  }
  std::fflush(stderr);
}

}  // namespace mnemo::bench
