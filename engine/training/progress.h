// Progress: a one-line progress display for long work (training, evaluation, indexing).
//
// On a terminal it redraws one line in place; otherwise (CI logs, files) it prints a full
// line at most every `log_every` so logs stay readable. Not thread-safe.
#ifndef MNEMO_ENGINE_TRAINING_PROGRESS_H_
#define MNEMO_ENGINE_TRAINING_PROGRESS_H_

#include <chrono>
#include <cstdio>
#include <string>

namespace mnemo::training {

class Progress {
 public:
  explicit Progress(std::string label, std::FILE* out = stderr,
                    std::chrono::seconds log_every = std::chrono::seconds(30));

  // fraction in [0, 1] drives the bar and the ETA; `detail` follows them.
  void Update(double fraction, const std::string& detail);
  // Ends the line (prints the final state once).
  void Finish(const std::string& detail);

  double elapsed_seconds() const;

  static std::string FormatDuration(double seconds);

 private:
  const std::string label_;
  std::FILE* const out_;
  const bool interactive_;
  const std::chrono::seconds log_every_;
  const std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_print_;
  bool printed_ = false;
};

}  // namespace mnemo::training

#endif  // MNEMO_ENGINE_TRAINING_PROGRESS_H_
