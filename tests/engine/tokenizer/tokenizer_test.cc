// The Tokenizer interface, as the engine sees a model's vocabulary, on the byte tokenizer (the
// native family's): what every family's tokenizer must also satisfy.
#include "engine/tokenizer/tokenizer.h"

#include <memory>
#include <string>
#include <vector>

#include "engine/tokenizer/byte_tokenizer.h"
#include "engine/tokenizer/utf8.h"
#include "gtest/gtest.h"

namespace mnemo::tokenizer {
namespace {

std::unique_ptr<Tokenizer> MakeByteTokenizer() { return std::make_unique<ByteTokenizer>(); }

TEST(TokenizerTest, ByteTokenizerDescribesItsVocabulary) {
  std::unique_ptr<Tokenizer> tokenizer = MakeByteTokenizer();
  EXPECT_EQ(tokenizer->name(), "byte");
  EXPECT_EQ(tokenizer->vocab_size(), 259);
  EXPECT_EQ(tokenizer->bos_id(), 256);
  EXPECT_EQ(tokenizer->eos_id(), 257);
  EXPECT_EQ(tokenizer->pad_id(), 258);
  const SpecialIds specials = tokenizer->special_ids();
  EXPECT_EQ(specials.bos, tokenizer->bos_id());
  EXPECT_EQ(specials.eos, tokenizer->eos_id());
  EXPECT_EQ(specials.pad, tokenizer->pad_id());
  for (int id = 0; id < 256; ++id) EXPECT_FALSE(tokenizer->IsSpecial(id)) << id;
  for (int id : {256, 257, 258}) {
    EXPECT_TRUE(tokenizer->IsSpecial(id)) << id;
    EXPECT_EQ(tokenizer->TokenBytes(id), "") << "a special stands for no text";
  }
  for (int id : {-1, 259, 100000}) {
    EXPECT_FALSE(tokenizer->IsSpecial(id)) << id;
    EXPECT_EQ(tokenizer->TokenBytes(id), "") << id;
  }
}

TEST(TokenizerTest, EncodeDecodeAndTokenBytesAgree) {
  std::unique_ptr<Tokenizer> tokenizer = MakeByteTokenizer();
  const std::string text = "caf\xC3\xA9 \xF0\x9F\x98\x80 ok";
  const std::vector<int> ids = tokenizer->Encode(text);
  for (int id : ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, tokenizer->vocab_size());
  }
  EXPECT_EQ(tokenizer->Decode(ids), text);
  std::string joined;
  for (int id : ids) joined += tokenizer->TokenBytes(id);
  EXPECT_EQ(joined, text) << "TokenBytes concatenate to Decode";
  // Specials in the middle vanish from the text.
  std::vector<int> with_specials = {tokenizer->bos_id()};
  with_specials.insert(with_specials.end(), ids.begin(), ids.end());
  with_specials.push_back(tokenizer->eos_id());
  EXPECT_EQ(tokenizer->Decode(with_specials), text);
}

// Streaming detokenisation as GenerateTask and Engine::Tokenize do it: each token's bytes
// through a UTF-8 stream decoder. Every delta is valid UTF-8, a token ending inside a character
// gives "" until the character completes, and the deltas concatenate to Decode(ids).
TEST(TokenizerTest, StreamedTokenBytesConcatenateToDecode) {
  std::unique_ptr<Tokenizer> tokenizer = MakeByteTokenizer();
  const std::string text = "a\xE2\x82\xAC b\xF0\x9F\x98\x80";  // "a€ b😀"
  const std::vector<int> ids = tokenizer->Encode(text);
  Utf8StreamDecoder decoder;
  std::string streamed;
  std::vector<std::string> deltas;
  for (int id : ids) {
    deltas.push_back(decoder.Feed(tokenizer->TokenBytes(id)));
    EXPECT_TRUE(IsValidUtf8(deltas.back()));
    streamed += deltas.back();
  }
  streamed += decoder.Flush();
  EXPECT_EQ(streamed, tokenizer->Decode(ids));
  EXPECT_EQ(deltas[1], "") << "the first byte of the euro sign completes nothing";
  EXPECT_EQ(deltas[3], "\xE2\x82\xAC");
}

}  // namespace
}  // namespace mnemo::tokenizer
