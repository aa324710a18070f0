// TokenDecoder: the `tokenizers` decoders mnemo supports, recast as a per-token rule (the
// bytes one token stands for) plus the leading-space rule (tokenizer.h), because mnemo
// streams tokens one at a time. Supported, alone or in a Sequence:
//   - ByteLevel: the byte-level alphabet back to bytes (byte_level.h);
//   - Replace: a literal string (SentencePiece's "▁" -> " ");
//   - ByteFallback: a <0xNN> token is that byte;
//   - Fuse: joins tokens (a no-op for bytes; it makes a later Strip act on the whole text);
//   - Strip(content ' ', start n, stop 0) after Fuse: drops n leading spaces of the text;
//   - Metaspace: the replacement -> ' ', and (prepend_scheme not "never") one leading space of
//     the text dropped.
// A token whose bytes are not valid UTF-8 stays as raw bytes (transformers would show
// U+FFFD); callers stream them through Utf8StreamDecoder.
//
// Immutable after construction: thread-safe.
#ifndef MNEMO_ENGINE_TOKENIZER_TOKEN_DECODER_H_
#define MNEMO_ENGINE_TOKENIZER_TOKEN_DECODER_H_

#include <string>
#include <string_view>
#include <vector>

namespace mnemo::tokenizer {

struct DecoderStep {
  enum class Kind { kByteLevel, kReplace, kByteFallback };
  Kind kind = Kind::kByteLevel;
  std::string pattern;  // kReplace: the literal replaced
  std::string content;  // kReplace: its replacement
};

class TokenDecoder {
 public:
  TokenDecoder() = default;
  TokenDecoder(std::vector<DecoderStep> steps, int leading_spaces_dropped)
      : steps_(std::move(steps)), leading_spaces_dropped_(leading_spaces_dropped) {}

  // The bytes the vocabulary string `token` stands for.
  std::string TokenBytes(std::string_view token) const;
  int leading_spaces_dropped() const { return leading_spaces_dropped_; }

 private:
  std::vector<DecoderStep> steps_;
  int leading_spaces_dropped_ = 0;
};

}  // namespace mnemo::tokenizer

#endif  // MNEMO_ENGINE_TOKENIZER_TOKEN_DECODER_H_
