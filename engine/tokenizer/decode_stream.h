// DecodeStream: turns ids, one at a time, into valid UTF-8 text deltas the way Decode would.
//
// Streams TokenBytes through a Utf8StreamDecoder (utf8.h) and applies the tokenizer's
// leading-space rule (tokenizer.h): a stream that starts a text drops up to
// leading_spaces_dropped() ' ' bytes from its very start, so its deltas plus Flush() equal
// SanitizeUtf8(Decode(ids)). A stream that continues a text (tokens generated after a prompt)
// keeps every byte, so it equals SanitizeUtf8 of the TokenBytes concatenated.
//
// Borrows the tokenizer, which must outlive it. A value type; not thread-safe, one per stream.
#ifndef MNEMO_ENGINE_TOKENIZER_DECODE_STREAM_H_
#define MNEMO_ENGINE_TOKENIZER_DECODE_STREAM_H_

#include <string>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"

namespace mnemo::tokenizer {

class DecodeStream {
 public:
  // `starts_text`: no text comes before the ids this stream is fed.
  DecodeStream(const Tokenizer& tokenizer, bool starts_text);

  // The text completed by `id` ("" for a special, or for bytes that only start a character).
  std::string Feed(int id);
  // Ends the stream: U+FFFD when a partial character is pending, else "".
  std::string Flush() { return utf8_.Flush(); }

 private:
  const Tokenizer* tokenizer_;  // borrowed
  int spaces_to_drop_;          // leading ' ' still to drop; 0 once any other byte has passed
  Utf8StreamDecoder utf8_;
};

}  // namespace mnemo::tokenizer

#endif  // MNEMO_ENGINE_TOKENIZER_DECODE_STREAM_H_
