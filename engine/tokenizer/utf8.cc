#include "engine/tokenizer/utf8.h"

namespace mnemo::tokenizer {

bool IsValidUtf8(std::string_view bytes) {
  size_t i = 0;
  const size_t n = bytes.size();
  while (i < n) {
    const unsigned char b = static_cast<unsigned char>(bytes[i]);
    if (b <= 0x7F) {
      ++i;
      continue;
    }
    int len = 0;
    unsigned char lower = 0x80, upper = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3;
      if (b == 0xE0) lower = 0xA0;  // overlong
      if (b == 0xED) upper = 0x9F;  // surrogates
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4;
      if (b == 0xF0) lower = 0x90;  // overlong
      if (b == 0xF4) upper = 0x8F;  // above U+10FFFF
    } else {
      return false;
    }
    if (n - i < static_cast<size_t>(len)) return false;
    for (int k = 1; k < len; ++k) {
      const unsigned char c = static_cast<unsigned char>(bytes[i + k]);
      if (c < lower || c > upper) return false;
      lower = 0x80;
      upper = 0xBF;
    }
    i += len;
  }
  return true;
}

std::string SanitizeUtf8(std::string_view bytes) {
  Utf8StreamDecoder decoder;
  std::string out = decoder.Feed(bytes);
  out += decoder.Flush();
  return out;
}

std::string Utf8StreamDecoder::Feed(std::string_view bytes) {
  std::string out;
  for (char c : bytes) FeedByte(static_cast<unsigned char>(c), out);
  return out;
}

std::string Utf8StreamDecoder::Flush() {
  if (needed_ == 0) return "";
  Reset();
  return std::string(kReplacementChar);
}

void Utf8StreamDecoder::Reset() {
  seen_ = 0;
  needed_ = 0;
  lower_ = 0x80;
  upper_ = 0xBF;
}

void Utf8StreamDecoder::FeedByte(unsigned char b, std::string& out) {
  if (needed_ != 0) {
    if (b >= lower_ && b <= upper_) {
      pending_[seen_++] = static_cast<char>(b);
      lower_ = 0x80;
      upper_ = 0xBF;
      if (seen_ == needed_) {
        out.append(pending_, seen_);
        Reset();
      }
      return;
    }
    // The sequence in progress is broken: it reads as one U+FFFD and `b` starts afresh.
    Reset();
    out += kReplacementChar;
  }
  if (b <= 0x7F) {
    out.push_back(static_cast<char>(b));
    return;
  }
  if (b >= 0xC2 && b <= 0xDF) {
    needed_ = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    needed_ = 3;
    if (b == 0xE0) lower_ = 0xA0;
    if (b == 0xED) upper_ = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    needed_ = 4;
    if (b == 0xF0) lower_ = 0x90;
    if (b == 0xF4) upper_ = 0x8F;
  } else {
    out += kReplacementChar;  // C0, C1, F5..FF or a stray continuation byte
    return;
  }
  pending_[0] = static_cast<char>(b);
  seen_ = 1;
}

}  // namespace mnemo::tokenizer
