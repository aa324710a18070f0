#include "engine/tokenizer/utf8.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mnemo::tokenizer {
namespace {

const std::string kFffd(kReplacementChar);

std::string Repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// Feeds `bytes` one byte at a time; checks every delta is valid on its own.
std::string DecodeByteByByte(const std::string& bytes) {
  Utf8StreamDecoder decoder;
  std::string out;
  for (char c : bytes) {
    std::string delta = decoder.Feed(std::string(1, c));
    EXPECT_TRUE(IsValidUtf8(delta));
    out += delta;
  }
  out += decoder.Flush();
  return out;
}

TEST(Utf8Test, ValidStringsAreValid) {
  for (const std::string& s : std::vector<std::string>{"", "hello", "caf\xC3\xA9", "\xE2\x82\xAC 5",
                              "\xF0\x9F\x98\x80", "\xED\x9F\xBF", "\xEE\x80\x80",
                              "\xF4\x8F\xBF\xBF", std::string("a\0b", 3)}) {
    EXPECT_TRUE(IsValidUtf8(s)) << s;
    EXPECT_EQ(SanitizeUtf8(s), s);
    EXPECT_EQ(DecodeByteByByte(s), s);
  }
}

struct InvalidCase {
  const char* name;
  std::string bytes;
  std::string expected;  // after replacement
};

TEST(Utf8Test, EveryInvalidClassBecomesReplacementChars) {
  const std::vector<InvalidCase> cases = {
      {"stray continuation", "a\x80z", "a" + kFffd + "z"},
      {"stray continuation run", "\x80\xBF", Repeat(kFffd, 2)},
      {"overlong 2-byte C0", "\xC0\xAF", Repeat(kFffd, 2)},
      {"overlong 2-byte C1", "\xC1\xBF", Repeat(kFffd, 2)},
      {"overlong 3-byte", "\xE0\x80\xAF", Repeat(kFffd, 3)},
      {"overlong 4-byte", "\xF0\x80\x80\xAF", Repeat(kFffd, 4)},
      {"surrogate", "\xED\xA0\x80", Repeat(kFffd, 3)},
      {"above U+10FFFF", "\xF4\x90\x80\x80", Repeat(kFffd, 4)},
      {"F5 lead", "\xF5\x80\x80\x80", Repeat(kFffd, 4)},
      {"FF byte", "x\xFFy", "x" + kFffd + "y"},
      {"truncated then ASCII", "\xE2\x82" "a", kFffd + "a"},
      {"truncated 4-byte then ASCII", "\xF0\x9F\x98" "b", kFffd + "b"},
      {"truncated then new lead", "\xC3\xC3\xA9", kFffd + "\xC3\xA9"},
      {"truncated at end 2", "ok\xC3", "ok" + kFffd},
      {"truncated at end 3", "\xE2\x82", kFffd},
      {"truncated at end 4", "\xF0\x9F\x98", kFffd},
  };
  for (const InvalidCase& c : cases) {
    EXPECT_FALSE(IsValidUtf8(c.bytes)) << c.name;
    EXPECT_EQ(SanitizeUtf8(c.bytes), c.expected) << c.name;
    EXPECT_EQ(DecodeByteByByte(c.bytes), c.expected) << c.name;
    EXPECT_TRUE(IsValidUtf8(c.expected)) << c.name;
  }
}

TEST(Utf8Test, StreamingSplitAtEveryByteMatchesWhole) {
  const std::string text =
      "h\xC3\xA9llo \xE2\x82\xAC\xF0\x9F\x98\x80 \x80\xC0\xE2\x82 z\xED\xA0\x80\xF0\x9F";
  const std::string whole = SanitizeUtf8(text);
  for (size_t split = 0; split <= text.size(); ++split) {
    Utf8StreamDecoder decoder;
    std::string first = decoder.Feed(text.substr(0, split));
    std::string second = decoder.Feed(text.substr(split));
    std::string tail = decoder.Flush();
    EXPECT_TRUE(IsValidUtf8(first)) << split;
    EXPECT_TRUE(IsValidUtf8(second)) << split;
    EXPECT_EQ(first + second + tail, whole) << "split at " << split;
  }
  EXPECT_EQ(DecodeByteByByte(text), whole);
}

TEST(Utf8Test, LeadByteIsHeldBackUntilCompleted) {
  Utf8StreamDecoder decoder;
  EXPECT_EQ(decoder.Feed("\xE2"), "");
  EXPECT_TRUE(decoder.has_pending());
  EXPECT_EQ(decoder.Feed("\x82"), "");
  EXPECT_EQ(decoder.Feed("\xAC"), "\xE2\x82\xAC");
  EXPECT_FALSE(decoder.has_pending());
  EXPECT_EQ(decoder.Flush(), "");
}

TEST(Utf8Test, CopyPreviewsWithoutChangingTheOriginal) {
  Utf8StreamDecoder decoder;
  EXPECT_EQ(decoder.Feed("\xC3"), "");
  Utf8StreamDecoder preview = decoder;
  EXPECT_EQ(preview.Feed("\xA9"), "\xC3\xA9");
  EXPECT_EQ(decoder.Feed("\xA8"), "\xC3\xA8");
}

// Property: for random byte strings split randomly, deltas are valid UTF-8, their
// concatenation does not depend on the split, and a string is valid exactly when
// sanitising leaves it unchanged.
TEST(Utf8Test, RandomBytesProperties) {
  std::mt19937_64 rng(42);
  const std::vector<unsigned char> alphabet = {'a', 0x00, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0,
                                               0xBF, 0xC0, 0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0xF0,
                                               0xF4, 0xF5, 0xFF};
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bytes;
    const int len = static_cast<int>(rng() % 12);
    for (int i = 0; i < len; ++i) bytes.push_back(static_cast<char>(alphabet[rng() % alphabet.size()]));
    const std::string whole = SanitizeUtf8(bytes);
    ASSERT_TRUE(IsValidUtf8(whole)) << trial;
    ASSERT_EQ(IsValidUtf8(bytes), whole == bytes) << trial;
    Utf8StreamDecoder decoder;
    std::string out;
    size_t pos = 0;
    while (pos < bytes.size()) {
      const size_t n = 1 + rng() % 3;
      std::string delta = decoder.Feed(bytes.substr(pos, n));
      ASSERT_TRUE(IsValidUtf8(delta));
      out += delta;
      pos += n;
    }
    out += decoder.Flush();
    ASSERT_EQ(out, whole) << trial;
  }
}

}  // namespace
}  // namespace mnemo::tokenizer
