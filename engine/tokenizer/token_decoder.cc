#include "engine/tokenizer/token_decoder.h"

#include <optional>

#include "absl/strings/str_replace.h"
#include "engine/tokenizer/byte_level.h"

namespace mnemo::tokenizer {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The byte of a "<0xNN>" token (hex digits in either case), or -1.
int FallbackByte(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return -1;
  const int high = HexDigit(token[3]);
  const int low = HexDigit(token[4]);
  return high < 0 || low < 0 ? -1 : high * 16 + low;
}

}  // namespace

std::string TokenDecoder::TokenBytes(std::string_view token) const {
  std::string bytes(token);
  for (const DecoderStep& step : steps_) {
    switch (step.kind) {
      case DecoderStep::Kind::kByteLevel:
        if (std::optional<std::string> raw = FromByteLevel(bytes)) bytes = std::move(*raw);
        break;
      case DecoderStep::Kind::kReplace:
        bytes = absl::StrReplaceAll(bytes, {{step.pattern, step.content}});
        break;
      case DecoderStep::Kind::kByteFallback:
        if (const int byte = FallbackByte(bytes); byte >= 0)
          bytes = std::string(1, static_cast<char>(byte));
        break;
    }
  }
  return bytes;
}

}  // namespace mnemo::tokenizer
