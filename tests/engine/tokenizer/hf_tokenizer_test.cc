// LoadHfTokenizer against transformers 5.17's own ids for the five reference folders
// (tests/data/hf/*/tokenizer_reference.json): GPT-2 byte-level BPE, Llama/Mistral
// SentencePiece-style BPE (tokenizer.json and libsentencepiece), Qwen2/Llama 3 regex-split
// byte-level BPE. Plus invariants on texts of our own (round trip, determinism, streaming),
// libsentencepiece as an independent oracle for the Metaspace path, and the error messages.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/tokenizer/decode_stream.h"
#include "engine/tokenizer/hf_tokenizer_loader.h"
#include "engine/tokenizer/sentencepiece_tokenizer.h"
#include "engine/tokenizer/utf8.h"
#include "engine/util/files.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace mnemo::tokenizer {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// This test has no libprotobuf, so it can read tokenizer.model files (hf_tokenizer_loader.h).
const bool kSentencePieceInstalled = (InstallSentencePieceLoader(), true);

fs::path DataDir() {
  const char* source = std::getenv("MNEMO_SOURCE_DIR");
  return fs::path(source != nullptr ? source : MNEMO_TEST_SOURCE_DIR) / "tests/data/hf";
}

struct Fixture {
  const char* name;
  const char* tokenizer_name;
  int vocab_size;
  int bos;
  int eos;
};

const Fixture kFixtures[] = {
    {"gpt2", "bpe", 50257, -1, 50256},
    {"llama", "sentencepiece-bpe", 4000, 1, 2},
    {"mistral", "sentencepiece-bpe", 4000, 1, 2},
    {"qwen2", "bpe", 3000, -1, 0},
    {"llama3", "bpe", 3000, -1, 0},
};

std::shared_ptr<const Tokenizer> Load(const fs::path& dir) {
  absl::StatusOr<std::shared_ptr<const Tokenizer>> tokenizer = LoadHfTokenizer(dir.string());
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? *tokenizer : nullptr;
}

Json Reference(const std::string& name) {
  absl::StatusOr<std::string> text =
      util::ReadFile((DataDir() / name / "tokenizer_reference.json").string());
  EXPECT_TRUE(text.ok()) << text.status();
  return Json::parse(text.value_or("{}"));
}

// What a stream of `ids` that starts a text shows: DecodeStream's deltas plus Flush.
std::string Streamed(const Tokenizer& tokenizer, const std::vector<int>& ids, bool starts_text) {
  DecodeStream stream(tokenizer, starts_text);
  std::string text;
  for (int id : ids) {
    const std::string delta = stream.Feed(id);
    EXPECT_TRUE(IsValidUtf8(delta));
    text += delta;
  }
  return text + stream.Flush();
}

// A fresh directory under the test's temp dir, removed by the caller.
fs::path TempDir(const std::string& name) {
  fs::path dir = fs::path(::testing::TempDir()) / ("hf_tokenizer_test_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// Texts of our own, never given to the reference: mixed scripts, emoji, CRLF, long whitespace
// runs, special-token strings, odd bytes.
std::vector<std::string> OwnTexts() {
  return {
      "Grüße aus Köln! Ça va? ¿Qué tal? Добрый вечер. 你好，世界。 こんにちは。 안녕하세요",
      "emoji 👍🏽 family 👨‍👩‍👧 flag 🏳️‍🌈 keycap 1️⃣ — and a lone combining ́ "
      "mark",
      "line one\r\nline two\r\n\r\n\tindented\t\ttabs  \n   \n",
      "a" + std::string(300, ' ') + "b" + std::string(70, '\n') + "c\u00a0\u2009\u3000d",
      "x<|endoftext|>y <s> </s>s <|im_start|>user\nhi<|im_end|>",
      "I'M HERE, YOU'RE THERE; they'd've SAID 'tis I'll it's",
      "snake_case camelCase 3.14e-10 0xDEADBEEF 1,234,567 ½ ² ٣ ๓",
      "   leading and trailing   ",
      "",
      " ",
      "日本語のテキストと English mixed 中文 and العربية in one line",
  };
}

TEST(HfTokenizerTest, MatchesTransformersOnTheReferenceTexts) {
  for (const Fixture& fixture : kFixtures) {
    SCOPED_TRACE(fixture.name);
    std::shared_ptr<const Tokenizer> tokenizer = Load(DataDir() / fixture.name);
    ASSERT_NE(tokenizer, nullptr);
    EXPECT_EQ(tokenizer->name(), fixture.tokenizer_name);
    EXPECT_EQ(tokenizer->vocab_size(), fixture.vocab_size);
    EXPECT_EQ(tokenizer->bos_id(), fixture.bos);
    EXPECT_EQ(tokenizer->eos_id(), fixture.eos);
    EXPECT_EQ(tokenizer->eos_ids(), std::vector<int>{fixture.eos});
    const Json reference = Reference(fixture.name);
    ASSERT_GE(reference["texts"].size(), 10u);
    for (const Json& entry : reference["texts"]) {
      const std::string text = entry["text"];
      SCOPED_TRACE(text.substr(0, 40));
      const std::vector<int> plain = entry["ids_plain"];
      EXPECT_EQ(tokenizer->Encode(text), plain);
      EXPECT_EQ(tokenizer->EncodeWithSpecials(text),
                entry["ids_with_special"].get<std::vector<int>>());
      const std::string decoded = tokenizer->Decode(plain);
      if (entry["decode_roundtrip"].get<bool>()) {
        EXPECT_EQ(decoded, text);
      } else {
        EXPECT_NE(decoded, text);
      }
      EXPECT_EQ(Streamed(*tokenizer, plain, /*starts_text=*/true), SanitizeUtf8(decoded));
      // The raw TokenBytes concatenate to Decode plus the leading spaces it drops.
      std::string joined;
      for (int id : plain) joined += tokenizer->TokenBytes(id);
      EXPECT_EQ(joined.substr(joined.size() - decoded.size()), decoded);
      EXPECT_LE(joined.size() - decoded.size(),
                static_cast<size_t>(tokenizer->leading_spaces_dropped()));
    }
  }
}

TEST(HfTokenizerTest, LlamaDecodeDropsOnlyTheSpaceItsEncoderAdded) {
  std::shared_ptr<const Tokenizer> llama = Load(DataDir() / "llama");
  ASSERT_NE(llama, nullptr);
  EXPECT_EQ(llama->leading_spaces_dropped(), 1);
  EXPECT_EQ(llama->Decode(llama->Encode("Hello world")), "Hello world");
  // A text that starts with spaces gets no "▁" of its own (Metaspace prepends only when the
  // text does not start with one), so Decode loses one of them, as transformers does.
  EXPECT_EQ(llama->Decode(llama->Encode("   indented")), "  indented");
  // Tokens that continue a text (generated after a prompt) keep their space.
  const std::vector<int> world = llama->Encode("Hello world");
  auto space = std::find_if(world.begin() + 1, world.end(),
                            [&](int id) { return llama->TokenBytes(id).front() == ' '; });
  ASSERT_NE(space, world.end());
  const std::vector<int> tail(space, world.end());
  EXPECT_EQ(Streamed(*llama, tail, /*starts_text=*/false), " world");
  EXPECT_EQ(Streamed(*llama, tail, /*starts_text=*/true), "world");
  EXPECT_EQ(Streamed(*llama, world, /*starts_text=*/true), "Hello world");

  std::shared_ptr<const Tokenizer> gpt2 = Load(DataDir() / "gpt2");
  ASSERT_NE(gpt2, nullptr);
  EXPECT_EQ(gpt2->leading_spaces_dropped(), 0);
  EXPECT_EQ(gpt2->Decode(gpt2->Encode("   indented")), "   indented");
}

TEST(HfTokenizerTest, SentencePieceLibraryPathGivesTheLibrarysIds) {
  for (const char* name : {"llama", "mistral"}) {
    SCOPED_TRACE(name);
    const fs::path dir = TempDir(std::string("spm_") + name);
    for (const char* file :
         {"tokenizer.model", "tokenizer_config.json", "generation_config.json"}) {
      fs::copy_file(DataDir() / name / file, dir / file);
    }
    std::shared_ptr<const Tokenizer> tokenizer = Load(dir);
    ASSERT_NE(tokenizer, nullptr);
    EXPECT_EQ(tokenizer->name(), "sentencepiece");
    EXPECT_EQ(tokenizer->vocab_size(), 4000);
    EXPECT_EQ(tokenizer->bos_id(), 1);
    EXPECT_EQ(tokenizer->eos_id(), 2);
    EXPECT_TRUE(tokenizer->IsSpecial(1));
    EXPECT_FALSE(tokenizer->IsSpecial(100));
    const Json reference = Reference(name);  // the loop below must not outlive it
    for (const Json& entry : reference["texts"]) {
      const std::string text = entry["text"];
      SCOPED_TRACE(text.substr(0, 40));
      const std::vector<int> ids = entry["sentencepiece_ids"];
      EXPECT_EQ(tokenizer->Encode(text), ids);
      std::vector<int> with_bos = {1};
      with_bos.insert(with_bos.end(), ids.begin(), ids.end());
      EXPECT_EQ(tokenizer->EncodeWithSpecials(text), with_bos);
      EXPECT_EQ(tokenizer->Decode(ids), text);  // the library keeps the dummy-prefix space apart
      EXPECT_EQ(Streamed(*tokenizer, ids, /*starts_text=*/true), text);
    }
    fs::remove_all(dir);
  }
}

TEST(HfTokenizerTest, OwnTextsRoundTripDeterministicallyAndStream) {
  for (const Fixture& fixture : kFixtures) {
    SCOPED_TRACE(fixture.name);
    std::shared_ptr<const Tokenizer> tokenizer = Load(DataDir() / fixture.name);
    ASSERT_NE(tokenizer, nullptr);
    const bool sentencepiece = tokenizer->leading_spaces_dropped() > 0;
    for (const std::string& text : OwnTexts()) {
      SCOPED_TRACE(text);
      const std::vector<int> ids = tokenizer->Encode(text);
      EXPECT_EQ(tokenizer->Encode(text), ids) << "deterministic";
      for (int id : ids) {
        EXPECT_GE(id, 0);
        EXPECT_LT(id, tokenizer->vocab_size());
      }
      const std::string decoded = tokenizer->Decode(ids);
      // Specials stand for no text; a SentencePiece text that starts with a space loses one.
      std::string expected;
      for (int id : ids) expected += tokenizer->IsSpecial(id) ? "" : tokenizer->TokenBytes(id);
      if (!sentencepiece || text.empty() || text[0] != ' ') {
        bool has_special = false;
        for (int id : ids) has_special = has_special || tokenizer->IsSpecial(id);
        if (!has_special) {
          EXPECT_EQ(decoded, text);
        }
      }
      EXPECT_EQ(Streamed(*tokenizer, ids, /*starts_text=*/true), decoded);
    }
  }
}

TEST(HfTokenizerTest, MetaspaceBpeAgreesWithLibSentencePieceOnOwnTexts) {
  // The tokenizer.json conversion and the library share the model, so for texts that do not
  // start with a space (where Metaspace and the dummy prefix agree) the ids must match.
  std::shared_ptr<const Tokenizer> hf = Load(DataDir() / "llama");
  const fs::path dir = TempDir("spm_oracle");
  fs::copy_file(DataDir() / "llama/tokenizer.model", dir / "tokenizer.model");
  std::shared_ptr<const Tokenizer> spm = Load(dir);
  ASSERT_NE(hf, nullptr);
  ASSERT_NE(spm, nullptr);
  for (const std::string& text : OwnTexts()) {
    if (text.empty() || text[0] == ' ' || text.find('<') != std::string::npos) continue;
    SCOPED_TRACE(text);
    EXPECT_EQ(hf->Encode(text), spm->Encode(text));
  }
  fs::remove_all(dir);
}

TEST(HfTokenizerTest, AddedTokensAreCutOutOfTheText) {
  std::shared_ptr<const Tokenizer> gpt2 = Load(DataDir() / "gpt2");
  ASSERT_NE(gpt2, nullptr);
  const std::vector<int> ids = gpt2->Encode("x<|endoftext|>y");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[1], 50256);
  EXPECT_TRUE(gpt2->IsSpecial(50256));
  EXPECT_FALSE(gpt2->IsSpecial(ids[0]));
  EXPECT_EQ(gpt2->Decode(ids), "xy") << "specials stand for no text";
  EXPECT_EQ(gpt2->TokenBytes(50256), "");

  std::shared_ptr<const Tokenizer> qwen = Load(DataDir() / "qwen2");
  ASSERT_NE(qwen, nullptr);
  const std::vector<int> chat = qwen->Encode("<|im_start|>user\nhi<|im_end|>");
  EXPECT_EQ(chat.front(), 1);
  EXPECT_EQ(chat.back(), 2);
  EXPECT_EQ(qwen->pad_id(), -1) << "Qwen2 pads with its EOS, which must stay sampleable";
}

// Qwen2's tokenizer.json with extra added tokens that use lstrip / rstrip / single_word.
std::shared_ptr<const Tokenizer> QwenWithAddedTokens(const fs::path& dir) {
  Json json = Json::parse(util::ReadFile((DataDir() / "qwen2/tokenizer.json").string()).value());
  json["added_tokens"].push_back({{"id", 3000},
                                  {"content", "<mask>"},
                                  {"single_word", false},
                                  {"lstrip", true},
                                  {"rstrip", true},
                                  {"normalized", false},
                                  {"special", true}});
  json["added_tokens"].push_back({{"id", 3001},
                                  {"content", "cat"},
                                  {"single_word", true},
                                  {"lstrip", false},
                                  {"rstrip", false},
                                  {"normalized", false},
                                  {"special", false}});
  WriteFile(dir / "tokenizer.json", json.dump());
  return Load(dir);
}

TEST(HfTokenizerTest, AddedTokenFlagsFollowTokenizers) {
  const fs::path dir = TempDir("added");
  std::shared_ptr<const Tokenizer> tokenizer = QwenWithAddedTokens(dir);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->vocab_size(), 3002);
  // lstrip / rstrip: the spaces around <mask> belong to it.
  EXPECT_EQ(tokenizer->Encode("a  <mask>  b"),
            (std::vector<int>{tokenizer->Encode("a")[0], 3000, tokenizer->Encode("b")[0]}));
  // single_word: "cat" alone is the added token, inside a word it is ordinary text.
  const std::vector<int> alone = tokenizer->Encode("a cat here");
  EXPECT_NE(std::find(alone.begin(), alone.end(), 3001), alone.end());
  const std::vector<int> inside = tokenizer->Encode("concatenate");
  EXPECT_EQ(std::find(inside.begin(), inside.end(), 3001), inside.end());
  EXPECT_FALSE(tokenizer->IsSpecial(3001));
  EXPECT_EQ(tokenizer->TokenBytes(3001), "cat") << "a non-special added token is its content";
  fs::remove_all(dir);
}

TEST(HfTokenizerTest, MergesInBothJsonFormsGiveTheSameIds) {
  Json json = Json::parse(util::ReadFile((DataDir() / "qwen2/tokenizer.json").string()).value());
  Json as_strings = Json::array();
  for (const Json& pair : json["model"]["merges"]) {
    as_strings.push_back(pair[0].get<std::string>() + " " + pair[1].get<std::string>());
  }
  json["model"]["merges"] = as_strings;
  const fs::path dir = TempDir("merges");
  WriteFile(dir / "tokenizer.json", json.dump());
  std::shared_ptr<const Tokenizer> strings = Load(dir);
  std::shared_ptr<const Tokenizer> pairs = Load(DataDir() / "qwen2");
  ASSERT_NE(strings, nullptr);
  ASSERT_NE(pairs, nullptr);
  for (const std::string& text : OwnTexts()) EXPECT_EQ(strings->Encode(text), pairs->Encode(text));
  fs::remove_all(dir);
}

TEST(HfTokenizerTest, LegacyPrependNormalizerMatchesLibSentencePiece) {
  // Llama 2's older tokenizer.json: no pre-tokenizer, normalizer Prepend("▁") + Replace(" ",
  // "▁"). Prepend always adds the "▁", like the library's dummy prefix, so every reference
  // text (none holds a special) must give the library's ids.
  Json json = Json::parse(util::ReadFile((DataDir() / "llama/tokenizer.json").string()).value());
  json["pre_tokenizer"] = nullptr;
  json["normalizer"] = Json::parse(R"({"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "\u2581"},
      {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]})");
  const fs::path dir = TempDir("legacy");
  WriteFile(dir / "tokenizer.json", json.dump());
  std::shared_ptr<const Tokenizer> tokenizer = Load(dir);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->name(), "sentencepiece-bpe");
  const Json reference = Reference("llama");  // the loop below must not outlive it
  for (const Json& entry : reference["texts"]) {
    const std::string text = entry["text"];
    SCOPED_TRACE(text.substr(0, 40));
    const std::vector<int> ids = tokenizer->Encode(text);
    EXPECT_EQ(ids, entry["sentencepiece_ids"].get<std::vector<int>>());
    EXPECT_EQ(tokenizer->Decode(ids), text);
  }
  fs::remove_all(dir);
}

TEST(HfTokenizerTest, PostProcessorAndConfigFlagsDecideTheSpecials) {
  // Llama 3's real layout: Sequence[ByteLevel, TemplateProcessing(<|begin_of_text|> $A)].
  Json json = Json::parse(util::ReadFile((DataDir() / "qwen2/tokenizer.json").string()).value());
  json["post_processor"] = Json::parse(R"({"type": "Sequence", "processors": [
      {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
      {"type": "TemplateProcessing",
       "single": [{"SpecialToken": {"id": "<|im_start|>", "type_id": 0}},
                  {"Sequence": {"id": "A", "type_id": 0}},
                  {"SpecialToken": {"id": "<|im_end|>", "type_id": 0}}],
       "pair": [], "special_tokens": {
         "<|im_start|>": {"id": "<|im_start|>", "ids": [1], "tokens": ["<|im_start|>"]},
         "<|im_end|>": {"id": "<|im_end|>", "ids": [2], "tokens": ["<|im_end|>"]}}}]})");
  const fs::path dir = TempDir("template");
  WriteFile(dir / "tokenizer.json", json.dump());
  WriteFile(dir / "generation_config.json", R"({"eos_token_id": [0, 2]})");
  std::shared_ptr<const Tokenizer> tokenizer = Load(dir);
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<int> plain = tokenizer->Encode("hello");
  std::vector<int> expected = {1};
  expected.insert(expected.end(), plain.begin(), plain.end());
  expected.push_back(2);
  EXPECT_EQ(tokenizer->EncodeWithSpecials("hello"), expected);
  EXPECT_EQ(tokenizer->bos_id(), 1);
  EXPECT_EQ(tokenizer->eos_ids(), (std::vector<int>{0, 2}));

  // tokenizer_config.json's explicit flags rebuild the template, as transformers' Llama does.
  WriteFile(dir / "tokenizer_config.json",
            R"({"add_bos_token": false, "add_eos_token": true, "eos_token": "<|endoftext|>"})");
  tokenizer = Load(dir);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->bos_id(), -1);
  expected = plain;
  expected.push_back(0);
  EXPECT_EQ(tokenizer->EncodeWithSpecials("hello"), expected);
  fs::remove_all(dir);
}

TEST(HfTokenizerTest, InvalidUtf8IsEncodedAsReplacementCharacters) {
  std::shared_ptr<const Tokenizer> gpt2 = Load(DataDir() / "gpt2");
  ASSERT_NE(gpt2, nullptr);
  EXPECT_EQ(gpt2->Encode("a\xFF"
                         "b"),
            gpt2->Encode("a\xEF\xBF\xBD"
                         "b"));
}

TEST(HfTokenizerTest, LongRunsEncodeAndRoundTrip) {
  // One pre-token of 200k bytes stresses the regex (lookahead over a whitespace run) and the
  // merge loop; every tokenizer must stay total and lossless here.
  std::string emoji;
  for (int i = 0; i < 20000; ++i) emoji += "\xF0\x9F\x99\x82";
  const std::vector<std::string> texts = {
      "x" + std::string(200000, ' ') + "y", "x" + std::string(200000, '\n') + "y",
      "x" + std::string(100000, 'a'), "x" + emoji, "x \xC2\x85 y\xC2\x85\xC2\x85z"};
  for (const Fixture& fixture : kFixtures) {
    SCOPED_TRACE(fixture.name);
    std::shared_ptr<const Tokenizer> tokenizer = Load(DataDir() / fixture.name);
    ASSERT_NE(tokenizer, nullptr);
    for (const std::string& text : texts) {
      EXPECT_EQ(tokenizer->Decode(tokenizer->Encode(text)), text) << text.size();
    }
  }
}

// One line naming the file and the field.
void ExpectError(const absl::Status& status, absl::StatusCode code,
                 const std::vector<std::string>& mentions) {
  EXPECT_EQ(status.code(), code) << status;
  for (const std::string& part : mentions) {
    EXPECT_NE(status.message().find(part), std::string::npos) << status << " lacks " << part;
  }
  EXPECT_EQ(status.message().find('\n'), std::string::npos) << status;
}

TEST(HfTokenizerTest, ErrorsNameTheFileAndField) {
  const fs::path dir = TempDir("errors");
  ExpectError(LoadHfTokenizer((dir / "absent").string()).status(), absl::StatusCode::kNotFound,
              {"absent", "tokenizer.json", "tokenizer.model"});

  WriteFile(dir / "tokenizer.json", "{\"model\": {\"type\": \"BPE\", ");
  ExpectError(LoadHfTokenizer(dir.string()).status(), absl::StatusCode::kInvalidArgument,
              {"tokenizer.json", "not valid JSON"});

  Json json = Json::parse(util::ReadFile((DataDir() / "qwen2/tokenizer.json").string()).value());
  Json unknown_model = json;
  unknown_model["model"]["type"] = "WordPiece";
  WriteFile(dir / "tokenizer.json", unknown_model.dump());
  ExpectError(LoadHfTokenizer(dir.string()).status(), absl::StatusCode::kUnimplemented,
              {"tokenizer.json", "model.type", "WordPiece", "supported: BPE"});

  Json unknown_pre = json;
  unknown_pre["pre_tokenizer"]["pretokenizers"][0] = {{"type", "Digits"}};
  WriteFile(dir / "tokenizer.json", unknown_pre.dump());
  ExpectError(LoadHfTokenizer(dir.string()).status(), absl::StatusCode::kUnimplemented,
              {"tokenizer.json", "pre_tokenizer.pretokenizers[0]", "Digits", "Split"});

  Json unknown_decoder = json;
  unknown_decoder["decoder"] = {{"type", "WordPiece"}};
  WriteFile(dir / "tokenizer.json", unknown_decoder.dump());
  ExpectError(LoadHfTokenizer(dir.string()).status(), absl::StatusCode::kUnimplemented,
              {"tokenizer.json", "decoder", "WordPiece", "ByteLevel"});

  Json unknown_normalizer = json;
  unknown_normalizer["normalizer"] = {{"type", "BertNormalizer"}};
  WriteFile(dir / "tokenizer.json", unknown_normalizer.dump());
  ExpectError(LoadHfTokenizer(dir.string()).status(), absl::StatusCode::kUnimplemented,
              {"tokenizer.json", "normalizer", "BertNormalizer", "NFC"});

  Json no_vocab = json;
  no_vocab["model"].erase("vocab");
  WriteFile(dir / "tokenizer.json", no_vocab.dump());
  ExpectError(LoadHfTokenizer(dir.string()).status(), absl::StatusCode::kInvalidArgument,
              {"tokenizer.json", "model.vocab", "missing"});

  Json bad_merge = json;
  bad_merge["model"]["merges"][0] = {"zzzq", "qqqz"};
  WriteFile(dir / "tokenizer.json", bad_merge.dump());
  ExpectError(LoadHfTokenizer(dir.string()).status(), absl::StatusCode::kInvalidArgument,
              {"tokenizer.json", "model", "merge 0", "zzzq"});

  WriteFile(dir / "tokenizer.json", json.dump());
  WriteFile(dir / "generation_config.json", "{\"eos_token_id\": \"two\"}");
  ExpectError(LoadHfTokenizer(dir.string()).status(), absl::StatusCode::kInvalidArgument,
              {"generation_config.json", "eos_token_id"});
  WriteFile(dir / "generation_config.json", "{\"eos_token_id\": [2, 0]}");
  absl::StatusOr<std::shared_ptr<const Tokenizer>> listed = LoadHfTokenizer(dir.string());
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ((*listed)->eos_ids(), (std::vector<int>{2, 0}));
  EXPECT_EQ((*listed)->eos_id(), 2);

  fs::remove(dir / "tokenizer.json");
  WriteFile(dir / "tokenizer.model", "not a model");
  ExpectError(LoadHfTokenizer(dir.string()).status(), absl::StatusCode::kInvalidArgument,
              {"tokenizer.model"});
  fs::remove_all(dir);
}

// Not a timing assertion: prints encode speed on ~1 MB of the reference texts.
TEST(HfTokenizerTest, EncodeSpeed) {
  for (const char* name : {"gpt2", "llama", "qwen2"}) {
    std::shared_ptr<const Tokenizer> tokenizer = Load(DataDir() / name);
    ASSERT_NE(tokenizer, nullptr);
    std::string text;
    const Json reference = Reference(name);
    while (text.size() < (1 << 20)) {
      for (const Json& entry : reference["texts"]) text += entry["text"].get<std::string>() + "\n";
    }
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int> ids = tokenizer->Encode(text);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("[ speed    ] %-8s %.2f MB -> %zu tokens in %.3f s: %.0f tokens/s, %.2f MB/s\n",
                name, text.size() / 1e6, ids.size(), seconds, ids.size() / seconds,
                text.size() / 1e6 / seconds);
    EXPECT_GT(ids.size(), text.size() / 8);
  }
}

}  // namespace
}  // namespace mnemo::tokenizer
