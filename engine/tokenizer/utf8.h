// UTF-8 helpers for a byte-level model: validation, and an incremental decoder that turns a
// stream of arbitrary bytes into valid UTF-8 text deltas.
//
// Invalid input follows the Unicode "maximal subpart" practice (the same as the WHATWG
// decoder and Python's errors="replace"): every maximal prefix of a well-formed sequence that
// cannot be completed, and every byte that cannot start one, becomes exactly one U+FFFD.
// Overlong forms (C0, C1, E0 80..9F, F0 80..8F), surrogates (ED A0..BF), code points above
// U+10FFFF (F4 90..BF, F5..FF) and stray continuation bytes are all invalid.
#ifndef MNEMO_ENGINE_TOKENIZER_UTF8_H_
#define MNEMO_ENGINE_TOKENIZER_UTF8_H_

#include <string>
#include <string_view>

namespace mnemo::tokenizer {

// U+FFFD REPLACEMENT CHARACTER, UTF-8 encoded.
inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

// True when `bytes` is well-formed UTF-8 (an empty string is).
bool IsValidUtf8(std::string_view bytes);

// `bytes` with every ill-formed subsequence replaced by U+FFFD.
std::string SanitizeUtf8(std::string_view bytes);

// Utf8StreamDecoder: feeds bytes in any split and returns the text they complete.
//
// Holds back an incomplete multi-byte sequence until the byte that completes (or breaks) it
// arrives, so every returned delta is valid UTF-8 on its own and the concatenation of all
// deltas plus Flush() equals SanitizeUtf8(all bytes), however the bytes were split.
// A value type: cheap to copy (a copy can preview what a byte would produce).
// Not thread-safe; one per output stream.
class Utf8StreamDecoder {
 public:
  // Appends `bytes`; returns the valid UTF-8 text completed by them ("" when they only
  // started or continued a multi-byte character).
  std::string Feed(std::string_view bytes);
  // Ends the stream: U+FFFD when a partial sequence is pending, else "". Resets the decoder.
  std::string Flush();
  // True while an incomplete multi-byte sequence is held back.
  bool has_pending() const { return needed_ != 0; }

 private:
  // Appends the text for one byte to `out`.
  void FeedByte(unsigned char byte, std::string& out);
  void Reset();

  char pending_[4] = {0, 0, 0, 0};  // the bytes of the sequence being assembled
  int seen_ = 0;                    // bytes of it received, lead byte included
  int needed_ = 0;                  // total length of it; 0 = no sequence in progress
  unsigned char lower_ = 0x80;      // allowed range of the next continuation byte
  unsigned char upper_ = 0xBF;
};

}  // namespace mnemo::tokenizer

#endif  // MNEMO_ENGINE_TOKENIZER_UTF8_H_
