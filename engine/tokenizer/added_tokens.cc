#include "engine/tokenizer/added_tokens.h"

#include <algorithm>

#include "engine/tokenizer/pcre2_regex.h"

namespace mnemo::tokenizer {
namespace {

// The code point of the UTF-8 character at `text[at]` (text is valid UTF-8).
char32_t DecodeAt(std::string_view text, size_t at, size_t* length) {
  const unsigned char lead = static_cast<unsigned char>(text[at]);
  int n = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
  n = static_cast<int>(std::min<size_t>(n, text.size() - at));
  char32_t cp = n == 1 ? lead : n == 2 ? (lead & 0x1F) : n == 3 ? (lead & 0x0F) : (lead & 0x07);
  for (int i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<unsigned char>(text[at + i]) & 0x3F);
  *length = static_cast<size_t>(n);
  return cp;
}

// The start of the last character of text[0, end).
size_t LastCharStart(std::string_view text, size_t end) {
  size_t at = end - 1;
  while (at > 0 && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) --at;
  return at;
}

// Unicode White_Space (what `tokenizers` strips around lstrip / rstrip tokens).
bool IsWhitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// A regex word character: a letter, mark, number or connector punctuation ('_').
bool IsWordChar(std::string_view character) {
  static const Pcre2Regex* const word = [] {
    auto regex = Pcre2Regex::Create(R"([\p{L}\p{M}\p{N}\p{Pc}])");
    return regex.ok() ? regex->release() : nullptr;
  }();
  if (word == nullptr) return false;
  auto matches = word->FindAll(character);
  return matches.ok() && !matches->empty();
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  for (int i = 0; i < static_cast<int>(tokens_.size()); ++i) {
    if (tokens_[i].content.empty()) continue;
    by_first_byte_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(i);
  }
  for (std::vector<int>& bucket : by_first_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(), [&](int a, int b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
  }
}

int AddedTokenMatcher::LongestAt(std::string_view text, size_t at) const {
  for (int index : by_first_byte_[static_cast<unsigned char>(text[at])]) {
    const std::string& content = tokens_[index].content;
    if (text.compare(at, content.size(), content) == 0) return index;
  }
  return -1;
}

std::vector<Segment> AddedTokenMatcher::Split(std::string_view text) const {
  std::vector<Segment> segments;
  size_t done = 0;  // text before this is in segments
  size_t at = 0;
  while (at < text.size()) {
    const int index = LongestAt(text, at);
    if (index < 0) {
      ++at;
      continue;
    }
    const AddedToken& token = tokens_[index];
    size_t begin = at;
    size_t end = at + token.content.size();
    if (token.single_word) {
      size_t length = 0;
      const bool word_before =
          begin > 0 &&
          IsWordChar(text.substr(LastCharStart(text, begin), begin - LastCharStart(text, begin)));
      bool word_after = false;
      if (end < text.size()) {
        DecodeAt(text, end, &length);
        word_after = IsWordChar(text.substr(end, length));
      }
      if (word_before || word_after) {
        at = end;  // skipped whole: the search goes on after it, as `tokenizers`' does
        continue;
      }
    }
    if (token.lstrip) {
      while (begin > done) {
        const size_t prev = LastCharStart(text, begin);
        size_t length = 0;
        if (!IsWhitespace(DecodeAt(text, prev, &length))) break;
        begin = prev;
      }
    }
    if (token.rstrip) {
      while (end < text.size()) {
        size_t length = 0;
        if (!IsWhitespace(DecodeAt(text, end, &length))) break;
        end += length;
      }
    }
    if (begin > done) segments.push_back({done, begin, -1});
    segments.push_back({begin, end, token.id});
    done = end;
    at = end;
  }
  if (done < text.size()) segments.push_back({done, text.size(), -1});
  return segments;
}

}  // namespace mnemo::tokenizer
