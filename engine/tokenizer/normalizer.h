// Normalizer: the `tokenizers` normalizers a Hugging Face BPE tokenizer.json may name that
// mnemo supports: Prepend (a prefix on every non-empty segment: Llama 2's legacy "▁"),
// Replace (every match of a literal string or regex), the Unicode normalization forms NFC,
// NFD, NFKC, NFKD (through ICU; Qwen2's tokenizer.json asks for NFC) and Sequence of them.
// Applied to each piece of text between added tokens, before pre-tokenization.
//
// Immutable after construction: Apply may be called from any thread at once.
#ifndef MNEMO_ENGINE_TOKENIZER_NORMALIZER_H_
#define MNEMO_ENGINE_TOKENIZER_NORMALIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "engine/tokenizer/pcre2_regex.h"

namespace mnemo::tokenizer {

struct NormalizerStep {
  enum class Kind { kPrepend, kReplace, kNfc, kNfd, kNfkc, kNfkd };
  Kind kind = Kind::kPrepend;
  std::string text;                           // kPrepend: the prefix; kReplace: the replacement
  std::shared_ptr<const Pcre2Regex> pattern;  // kReplace: what is replaced
};

class Normalizer {
 public:
  Normalizer() = default;
  explicit Normalizer(std::vector<NormalizerStep> steps) : steps_(std::move(steps)) {}

  bool empty() const { return steps_.empty(); }
  // Normalizes `text` in place. A Replace whose regex fails (PCRE2's resource limits) leaves
  // the text as it is, so encoding is total.
  void Apply(std::string& text) const;

 private:
  std::vector<NormalizerStep> steps_;
};

}  // namespace mnemo::tokenizer

#endif  // MNEMO_ENGINE_TOKENIZER_NORMALIZER_H_
