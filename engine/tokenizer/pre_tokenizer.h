// PreTokenizer: splits a normalized piece of text into the pre-tokens ("words") the BPE model
// merges within, as the `tokenizers` library's pre-tokenizers do. Supported, alone or in a
// Sequence:
//   - Split: a regex (or literal) with behavior Isolated, Removed, MergedWithPrevious,
//     MergedWithNext or Contiguous, and invert (Qwen2 and Llama 3 split with a regex here);
//   - ByteLevel: optional prefix space, GPT-2's split regex (use_regex), then every byte
//     written in the byte-level alphabet (byte_level.h);
//   - Metaspace: ' ' -> the replacement ("▁"), the replacement prepended (always, or only at
//     the start of the text: "first"; never when the piece already starts with it), optional
//     split before each replacement.
//
// Immutable after construction: Run may be called from any thread at once.
#ifndef MNEMO_ENGINE_TOKENIZER_PRE_TOKENIZER_H_
#define MNEMO_ENGINE_TOKENIZER_PRE_TOKENIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "engine/tokenizer/pcre2_regex.h"

namespace mnemo::tokenizer {

// GPT-2's split regex, which ByteLevel uses when use_regex is true.
inline constexpr char kGpt2SplitRegex[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class SplitBehavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };
enum class PrependScheme { kAlways, kFirst, kNever };

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel, kMetaspace };
  Kind kind = Kind::kSplit;
  // kSplit: the pattern; kByteLevel: GPT-2's regex, or null when use_regex is false.
  std::shared_ptr<const Pcre2Regex> regex;
  SplitBehavior behavior = SplitBehavior::kIsolated;  // kSplit
  bool invert = false;                                // kSplit
  bool add_prefix_space = false;                      // kByteLevel
  std::string replacement = "\xE2\x96\x81";           // kMetaspace: "▁"
  PrependScheme prepend = PrependScheme::kAlways;     // kMetaspace
  bool split = false;                                 // kMetaspace
};

// One pre-token: its text, and whether it starts at the first byte of the input text (what
// Metaspace's "first" scheme asks).
struct PreToken {
  std::string text;
  bool at_text_start = false;
};

class PreTokenizer {
 public:
  PreTokenizer() = default;
  explicit PreTokenizer(std::vector<PreTokenizerStep> steps) : steps_(std::move(steps)) {}

  // Splits `piece` and appends its non-empty pre-tokens to `out`. A regex that fails on a
  // piece (PCRE2's resource limits; not seen in practice) leaves that piece unsplit, so
  // encoding is total.
  void Run(PreToken piece, std::vector<PreToken>& out) const;

 private:
  std::vector<PreTokenizerStep> steps_;
};

}  // namespace mnemo::tokenizer

#endif  // MNEMO_ENGINE_TOKENIZER_PRE_TOKENIZER_H_
