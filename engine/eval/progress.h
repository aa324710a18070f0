// ProgressMeter: one status line on stderr for a long evaluation (units done, rate, ETA).
//
// The caller states the total work up front (bytes over every pass) and reports increments;
// the meter redraws at most a few times a second on a terminal (carriage return), and prints
// a full line every `line_interval` seconds otherwise (logs). Not thread-safe.
#ifndef MNEMO_ENGINE_EVAL_PROGRESS_H_
#define MNEMO_ENGINE_EVAL_PROGRESS_H_

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace mnemo::eval {

class ProgressMeter {
 public:
  // `sink` must outlive the meter (stderr in mnemo-eval; nullptr silences it).
  ProgressMeter(int64_t total_units, std::FILE* sink, double line_interval_s = 15.0);

  // What is running now, e.g. "XL memory  file 3/12".
  void SetStage(std::string stage);
  void Advance(int64_t units);
  // Prints a result line (ending a terminal's carriage-return line first), then redraws.
  void Log(const std::string& line);
  // Ends the current line (a terminal's carriage-return line) after the last update.
  void Finish();

  int64_t done() const { return done_; }
  double ElapsedSeconds() const;
  // "1m23s"; "--" for a negative or unknown duration.
  static std::string FormatDuration(double seconds);

 private:
  void Draw(bool force);

  const int64_t total_;
  std::FILE* const sink_;
  const bool terminal_;
  const double line_interval_s_;
  const std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  int64_t done_ = 0;
  std::string stage_;
};

}  // namespace mnemo::eval

#endif  // MNEMO_ENGINE_EVAL_PROGRESS_H_
