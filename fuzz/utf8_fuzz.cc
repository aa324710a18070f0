// utf8_fuzz: engine/tokenizer/utf8.cc and decode_stream.cc against the contracts of utf8.h and
// decode_stream.h, on arbitrary bytes.
//
// Input: [split byte][text]. The split byte seeds where the text is cut into Feed calls (and
// which ids are specials), so one input covers one way of streaming it.
//
// Checks:
//   - IsValidUtf8 agrees with a plain code-point decoder written here (Unicode's definition:
//     shortest form, no surrogates, nothing above U+10FFFF);
//   - SanitizeUtf8 is valid UTF-8, and is the identity exactly on valid text;
//   - Utf8StreamDecoder: every delta is valid on its own, and the deltas plus Flush equal
//     SanitizeUtf8 of everything fed, however the bytes were cut;
//   - DecodeStream over ByteTokenizer ids (the text's bytes with specials mixed in) equals
//     SanitizeUtf8(Decode(ids)).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/byte_tokenizer.h"
#include "engine/tokenizer/decode_stream.h"
#include "engine/tokenizer/utf8.h"
#include "fuzz/fuzz_support.h"

namespace mnemo::fuzz {
namespace {

// The length of the well-formed character at the start of `bytes`, or 0 when there is none.
// Decodes the code point bit by bit and then rejects what Unicode excludes, independently of
// utf8.cc's per-lead-byte ranges.
size_t ReferenceCharLength(std::string_view bytes) {
  const auto byte = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])); };
  const uint32_t lead = byte(0);
  size_t length = 0;
  uint32_t code = 0;
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) {
    length = 2;
    code = lead & 0x1F;
  } else if ((lead >> 4) == 0xE) {
    length = 3;
    code = lead & 0x0F;
  } else if ((lead >> 3) == 0x1E) {
    length = 4;
    code = lead & 0x07;
  } else {
    return 0;  // a continuation byte, or F8..FF
  }
  if (bytes.size() < length) return 0;
  for (size_t i = 1; i < length; ++i) {
    if ((byte(i) >> 6) != 0x2) return 0;
    code = (code << 6) | (byte(i) & 0x3F);
  }
  constexpr uint32_t kShortest[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (code < kShortest[length]) return 0;          // overlong
  if (code >= 0xD800 && code <= 0xDFFF) return 0;  // surrogate
  if (code > 0x10FFFF) return 0;                   // beyond Unicode
  return length;
}

bool ReferenceValid(std::string_view bytes) {
  while (!bytes.empty()) {
    const size_t length = ReferenceCharLength(bytes);
    if (length == 0) return false;
    bytes.remove_prefix(length);
  }
  return true;
}

std::string Hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 0xF];
    out += ' ';
  }
  return out;
}

// Cut points from a small linear congruential sequence seeded by `seed`: pieces of 0..7 bytes.
std::vector<std::string_view> Split(std::string_view text, uint8_t seed) {
  std::vector<std::string_view> pieces;
  uint32_t state = seed;
  while (!text.empty()) {
    state = state * 1103515245u + 12345u;
    const size_t length = std::min<size_t>(text.size(), (state >> 16) % 8);
    pieces.push_back(text.substr(0, length));
    text.remove_prefix(length);
  }
  return pieces;
}

void CheckText(std::string_view text, uint8_t seed) {
  const bool valid = tokenizer::IsValidUtf8(text);
  FUZZ_CHECK(valid == ReferenceValid(text),
             "IsValidUtf8 says " + std::string(valid ? "valid" : "invalid") + " for " + Hex(text));

  const std::string sanitized = tokenizer::SanitizeUtf8(text);
  FUZZ_CHECK(tokenizer::IsValidUtf8(sanitized),
             "SanitizeUtf8 output is not valid: " + Hex(sanitized));
  FUZZ_CHECK(valid == (sanitized == text),
             "SanitizeUtf8 changed valid text or kept invalid text: " + Hex(text));

  tokenizer::Utf8StreamDecoder decoder;
  std::string streamed;
  for (std::string_view piece : Split(text, seed)) {
    const std::string delta = decoder.Feed(piece);
    FUZZ_CHECK(tokenizer::IsValidUtf8(delta), "a Feed delta is not valid: " + Hex(delta));
    streamed += delta;
  }
  streamed += decoder.Flush();
  FUZZ_CHECK(!decoder.has_pending(), "has_pending() after Flush");
  FUZZ_CHECK(streamed == sanitized,
             "streamed " + Hex(streamed) + "but SanitizeUtf8 gives " + Hex(sanitized));
}

void CheckDecodeStream(std::string_view text, uint8_t seed) {
  const tokenizer::ByteTokenizer bytes;
  std::vector<int> ids = bytes.Encode(text);
  // Specials (and an out-of-range id) between the bytes: they stand for nothing.
  uint32_t state = seed;
  for (size_t i = 0; i < ids.size(); i += 1 + (state >> 16) % 5) {
    state = state * 1103515245u + 12345u;
    const int special = (state >> 8) % 4 == 3 ? bytes.vocab_size() : 256 + (state >> 8) % 3;
    ids.insert(ids.begin() + static_cast<std::ptrdiff_t>(i), special);
  }
  for (bool starts_text : {true, false}) {
    tokenizer::DecodeStream stream(bytes, starts_text);
    std::string streamed;
    for (int id : ids) streamed += stream.Feed(id);
    streamed += stream.Flush();
    const std::string expected = tokenizer::SanitizeUtf8(bytes.Decode(ids));
    FUZZ_CHECK(streamed == expected,
               "DecodeStream gave " + Hex(streamed) + "but SanitizeUtf8(Decode) " + Hex(expected));
  }
}

}  // namespace
}  // namespace mnemo::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  mnemo::fuzz::CheckText(text, data[0]);
  mnemo::fuzz::CheckDecodeStream(text, data[0]);
  return 0;
}
