// TextSource: real text for benchmarks, as a model's tokens: the *.py files below a directory
// (sorted, recursively) concatenated and encoded with the model's tokenizer (the byte
// vocabulary: one token per byte), cycling from the start when exhausted.
//
// Owns the bytes it read (at most max_bytes). Not thread-safe.
#ifndef MNEMO_TOOLS_DECODE_BENCH_TEXT_SOURCE_H_
#define MNEMO_TOOLS_DECODE_BENCH_TEXT_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"

namespace mnemo::tools {

class TextSource {
 public:
  // Reads files ending in `suffix` below `dir` until max_bytes are held. NOT_FOUND if none.
  static absl::StatusOr<std::unique_ptr<TextSource>> Create(
      const std::string& dir, const std::string& suffix, int64_t max_bytes,
      const tokenizer::Tokenizer& tokenizer);

  // The next n tokens, cycling through the text.
  std::vector<int> Next(int64_t n);

  int64_t bytes() const { return static_cast<int64_t>(text_.size()); }
  int files() const { return files_; }
  int64_t cycles() const { return cycles_; }  // times the text wrapped round

 private:
  TextSource() = default;

  std::string text_;
  std::vector<int> tokens_;
  int files_ = 0;
  int64_t cursor_ = 0;
  int64_t cycles_ = 0;
};

}  // namespace mnemo::tools

#endif  // MNEMO_TOOLS_DECODE_BENCH_TEXT_SOURCE_H_
