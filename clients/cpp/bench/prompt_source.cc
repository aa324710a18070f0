#include "clients/cpp/bench/prompt_source.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mnemo::bench {
namespace {

// Common English words: the synthetic text looks like prose to a byte-level model, which
// keeps it in the range of inputs a trained model sees.
constexpr const char* kWords[] = {
    "the",    "of",     "and",    "to",     "in",    "a",      "is",      "that",   "for",
    "it",     "as",     "was",    "with",   "be",    "by",     "on",      "not",    "he",
    "this",   "are",    "or",     "his",    "from",  "at",     "which",   "but",    "have",
    "an",     "had",    "they",   "you",    "were",  "their",  "one",     "all",    "we",
    "can",    "her",    "has",    "there",  "been",  "if",     "more",    "when",   "will",
    "would",  "who",    "so",     "no",     "time",  "memory", "model",   "session", "server",
    "stream", "token",  "layer",  "long",   "text",  "state",  "request", "value",  "first",
    "after",  "before", "number", "people", "water", "world",  "system",  "into",   "over",
};
constexpr uint64_t kWordCount = sizeof(kWords) / sizeof(kWords[0]);

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

bool IsContinuationByte(unsigned char c) { return (c & 0xC0) == 0x80; }

// Whether `text` is well-formed UTF-8 (no overlongs, surrogates or code points > U+10FFFF).
bool IsValidUtf8(const std::string& text) {
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = text[i];
    int extra = 0;
    uint32_t code = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1;
      code = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      code = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      code = c & 0x07;
    } else {
      return false;
    }
    if (i + extra >= text.size()) return false;  // truncated sequence
    for (int k = 1; k <= extra; ++k) {
      const unsigned char next = text[i + k];
      if (!IsContinuationByte(next)) return false;
      code = (code << 6) | (next & 0x3F);
    }
    static constexpr uint32_t kMinForLength[] = {0, 0x80, 0x800, 0x10000};
    if (code < kMinForLength[extra] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) {
      return false;
    }
    i += extra + 1;
  }
  return true;
}

}  // namespace

std::unique_ptr<PromptSource> PromptSource::Synthetic(int tokens) {
  return std::unique_ptr<PromptSource>(new PromptSource("", tokens, "synthetic"));
}

absl::StatusOr<std::unique_ptr<PromptSource>> PromptSource::FromFile(const std::string& path,
                                                                     int tokens) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot read prompt file ", path));
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat("prompt file is empty: ", path));
  if (!IsValidUtf8(text)) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt file is not valid UTF-8 (the server rejects such prompts): ", path));
  }
  return std::unique_ptr<PromptSource>(new PromptSource(std::move(text), tokens, path));
}

std::string PromptSource::Get(uint64_t index) const {
  return text_.empty() ? SyntheticPrompt(index) : FileWindow(index);
}

std::string PromptSource::SyntheticPrompt(uint64_t index) const {
  std::string prompt;
  prompt.reserve(tokens_ + 16);
  uint64_t state = SplitMix64(index);
  while (prompt.size() < static_cast<size_t>(tokens_)) {
    state = SplitMix64(state);
    if (!prompt.empty()) prompt += (state >> 60) == 0 ? ". " : " ";
    prompt += kWords[state % kWordCount];
  }
  prompt.resize(tokens_);  // exactly `tokens_` ASCII bytes
  return prompt;
}

std::string PromptSource::FileWindow(uint64_t index) const {
  const size_t size = text_.size();
  if (tokens_ <= 0) return text_;
  const size_t want = static_cast<size_t>(tokens_);
  size_t start = (index * want) % size;
  while (start > 0 && IsContinuationByte(text_[start])) --start;  // start on a character
  std::string window;
  window.reserve(want);
  while (window.size() < want) {
    const size_t take = std::min(want - window.size(), size - start);
    window.append(text_, start, take);
    start = 0;  // wrap around to the beginning of the file
  }
  // Drop a character cut in half at the end.
  size_t end = window.size();
  size_t lead = end;
  while (lead > 0 && IsContinuationByte(window[lead - 1])) --lead;
  if (lead > 0) {
    const unsigned char c = window[lead - 1];
    const size_t length = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
    if (end - (lead - 1) < length) end = lead - 1;
  }
  window.resize(end);
  return window;
}

}  // namespace mnemo::bench
