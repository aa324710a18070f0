#include "engine/tokenizer/byte_level.h"

#include <array>
#include <cstdint>

namespace mnemo::tokenizer {
namespace {

// The largest code point of the alphabet: 255 + the 68 bytes that are not printable Latin-1.
constexpr int kMaxCodePoint = 0x143;

bool StandsForItself(int byte) {
  return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) ||
         (byte >= 0xAE && byte <= 0xFF);
}

struct Tables {
  std::array<std::string, 256> encode;            // byte -> UTF-8 of its character
  std::array<int16_t, kMaxCodePoint + 1> decode;  // code point -> byte, -1 outside the alphabet

  Tables() {
    decode.fill(-1);
    int next = 256;
    for (int byte = 0; byte < 256; ++byte) {
      const int cp = StandsForItself(byte) ? byte : next++;
      decode[cp] = static_cast<int16_t>(byte);
      std::string& utf8 = encode[byte];
      if (cp < 0x80) {
        utf8.push_back(static_cast<char>(cp));
      } else {  // all code points here are below U+0800: two bytes
        utf8.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        utf8.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
    }
  }
};

const Tables& GetTables() {
  static const Tables* const tables = new Tables();
  return *tables;
}

}  // namespace

void AppendByteLevel(std::string_view bytes, std::string& out) {
  const Tables& tables = GetTables();
  for (char c : bytes) out += tables.encode[static_cast<unsigned char>(c)];
}

std::optional<std::string> FromByteLevel(std::string_view text) {
  const Tables& tables = GetTables();
  std::string bytes;
  bytes.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char lead = static_cast<unsigned char>(text[i]);
    int cp;
    if (lead < 0x80) {
      cp = lead;
      i += 1;
    } else if ((lead & 0xE0) == 0xC0 && i + 1 < text.size()) {
      cp = ((lead & 0x1F) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3F);
      i += 2;
    } else {
      return std::nullopt;  // three- and four-byte characters are all outside the alphabet
    }
    if (cp > kMaxCodePoint || tables.decode[cp] < 0) return std::nullopt;
    bytes.push_back(static_cast<char>(tables.decode[cp]));
  }
  return bytes;
}

}  // namespace mnemo::tokenizer
