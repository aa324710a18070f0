#include "engine/tokenizer/byte_tokenizer.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mnemo::tokenizer {
namespace {

TEST(ByteTokenizerTest, RoundTripsAnyBytes) {
  ByteTokenizer tokenizer;
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  for (const std::string& text : {std::string(), std::string("hello"),
                                  std::string("caf\xC3\xA9 \xF0\x9F\x98\x80"), all}) {
    std::vector<int> ids = tokenizer.Encode(text);
    ASSERT_EQ(ids.size(), text.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_EQ(ids[i], static_cast<unsigned char>(text[i]));
      EXPECT_TRUE(tokenizer.IsByte(ids[i]));
      EXPECT_EQ(tokenizer.TokenBytes(ids[i]), text.substr(i, 1));
    }
    EXPECT_EQ(tokenizer.Decode(ids), text);
  }
}

TEST(ByteTokenizerTest, SpecialsCarryNoBytes) {
  ByteTokenizer tokenizer;
  for (int id : {ByteTokenizer::kBosId, ByteTokenizer::kEosId, ByteTokenizer::kPadId}) {
    EXPECT_TRUE(tokenizer.IsSpecial(id));
    EXPECT_FALSE(tokenizer.IsByte(id));
    EXPECT_EQ(tokenizer.TokenBytes(id), "");
    EXPECT_FALSE(tokenizer.SpecialName(id).empty());
  }
  EXPECT_EQ(tokenizer.Decode({'a', ByteTokenizer::kBosId, 'b', ByteTokenizer::kEosId, -1, 999}),
            "ab");
  EXPECT_EQ(tokenizer.TokenBytes(-1), "");
  EXPECT_EQ(tokenizer.vocab_size(), 259);
}

}  // namespace
}  // namespace mnemo::tokenizer
