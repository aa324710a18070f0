// Pcre2Regex: a compiled PCRE2 pattern (UTF + UCP, JIT when available) that finds every
// non-overlapping match in a text, as the `tokenizers` library's Split and ByteLevel
// pre-tokenizers need. PCRE2 rather than RE2 because the split regexes of GPT-2, Qwen2 and
// Llama 3 use a lookahead (`\s+(?!\S)`).
//
// Owns the compiled code. Immutable after Create: FindAll may be called from any thread at
// once (each call makes its own match data).
#ifndef MNEMO_ENGINE_TOKENIZER_PCRE2_REGEX_H_
#define MNEMO_ENGINE_TOKENIZER_PCRE2_REGEX_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace mnemo::tokenizer {

class Pcre2Regex {
 public:
  // `literal`: the pattern is a plain string, not a regex. INVALID_ARGUMENT with PCRE2's
  // message and offset when the pattern does not compile.
  static absl::StatusOr<std::unique_ptr<Pcre2Regex>> Create(const std::string& pattern,
                                                            bool literal = false);
  ~Pcre2Regex();
  Pcre2Regex(const Pcre2Regex&) = delete;
  Pcre2Regex& operator=(const Pcre2Regex&) = delete;

  // The [begin, end) byte ranges of the leftmost-first, non-overlapping matches of the
  // pattern in `text`, in order; an empty match advances one character. `text` must be valid
  // UTF-8 (it is not checked again). INTERNAL when PCRE2 fails (resource limits).
  absl::StatusOr<std::vector<std::pair<size_t, size_t>>> FindAll(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Pcre2Regex(std::string pattern, void* code, bool jit)
      : pattern_(std::move(pattern)), code_(code), jit_(jit) {}

  std::string pattern_;
  void* code_;  // pcre2_code_8*, owned (void* keeps pcre2.h out of this header)
  bool jit_;    // JIT-compiled
};

}  // namespace mnemo::tokenizer

#endif  // MNEMO_ENGINE_TOKENIZER_PCRE2_REGEX_H_
