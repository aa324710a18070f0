// ProgressLine: the live status line mnemo-bench writes to stderr while a level runs.
//
// On a terminal the line is redrawn in place at most 4 times a second; otherwise (a log file, a
// pipe, CI) it is written as plain lines at most once a second, so logs stay readable.
// Used from the runner's waiting thread only; not thread-safe.
#ifndef MNEMO_CLIENTS_CPP_BENCH_PROGRESS_LINE_H_
#define MNEMO_CLIENTS_CPP_BENCH_PROGRESS_LINE_H_

#include <string>

#include "absl/time/time.h"

namespace mnemo::bench {

class ProgressLine {
 public:
  // `enabled` = false prints nothing at all.
  explicit ProgressLine(bool enabled);

  // Shows `text` unless the previous update was too recent.
  void Update(const std::string& text);
  // Shows `text` now and ends the line (the next Update starts a new one).
  void Finish(const std::string& text);

 private:
  void Write(const std::string& text, bool end_line);

  const bool enabled_;
  const bool tty_;
  const absl::Duration interval_;
  absl::Time last_ = absl::InfinitePast();
};

}  // namespace mnemo::bench

#endif  // MNEMO_CLIENTS_CPP_BENCH_PROGRESS_LINE_H_
