// The Hugging Face families through the running server: for every fixture of tests/data/hf
// (checkpoints saved by transformers 5.17 with what transformers computed for them),
// Tokenize gives transformers' ids, Score with token_ids gives its next-token log-probs,
// Generate with prompt_token_ids continues exactly as its greedy search, and the model info
// says what was loaded.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "engine/model/safetensors.h"
#include "tests/server/test_server.h"

namespace mnemo::server {
namespace {

using testing::ContextWithTimeout;
using testing::GenerateAll;
using testing::TestServer;

struct Fixture {
  const char* name;
  const char* architecture;
  const char* tokenizer;
};

const Fixture kFixtures[] = {
    {"gpt2", "GPT2LMHeadModel", "bpe"},
    {"llama", "LlamaForCausalLM", "sentencepiece-bpe"},
    {"mistral", "MistralForCausalLM", "sentencepiece-bpe"},
    {"qwen2", "Qwen2ForCausalLM", "bpe"},
    {"llama3", "LlamaForCausalLM", "bpe"},
};

void PrintTo(const Fixture& fixture, std::ostream* out) { *out << fixture.name; }

std::string FixtureDir(const std::string& name) {
  const char* source = std::getenv("MNEMO_SOURCE_DIR");
  return std::string(source != nullptr ? source : ".") + "/tests/data/hf/" + name;
}

struct Text {
  std::string text;
  std::vector<int> plain, with_special;  // transformers' ids without / with special tokens
  std::vector<int> scored;               // t{i}.ids
  torch::Tensor next_logprob;            // [scored - 1]
  int greedy_prompt_tokens = 0;
  std::vector<int> greedy;
};

std::vector<Text> ReadTexts(const std::string& dir) {
  std::ifstream in(dir + "/reference_public.json");
  nlohmann::json j = nlohmann::json::parse(in);
  auto file = model::SafetensorsFile::Open(dir + "/reference_public.safetensors");
  EXPECT_TRUE(file.ok()) << file.status();
  std::vector<Text> texts;
  for (const auto& t : j.at("texts")) {
    const std::string i = std::to_string(t.at("index").get<int>());
    Text text;
    text.text = t.at("text").get<std::string>();
    text.plain = t.at("ids_plain").get<std::vector<int>>();
    text.with_special = t.at("ids_with_special").get<std::vector<int>>();
    torch::Tensor ids = (*file)->ReadFloat("t" + i + ".ids")->to(torch::kInt64);
    for (int64_t k = 0; k < ids.size(0); ++k) text.scored.push_back(static_cast<int>(ids[k].item<int64_t>()));
    text.next_logprob = *(*file)->ReadFloat("t" + i + ".next_logprob");
    text.greedy_prompt_tokens = t.at("greedy_prompt_tokens").get<int>();
    text.greedy = t.at("greedy").get<std::vector<int>>();
    texts.push_back(std::move(text));
  }
  return texts;
}

class HfModelsTest : public ::testing::TestWithParam<Fixture> {};

TEST_P(HfModelsTest, ServesWhatTransformersComputes) {
  const Fixture& fixture = GetParam();
  const std::string dir = FixtureDir(fixture.name);
  TestServer server(testing::TestServerOptions{/*load=*/false});
  engine::EngineConfig config = testing::TinyEngineConfig();
  config.model_dir = dir;
  ASSERT_TRUE(server.server().LoadEngine(config).ok());
  auto generation = server.generation();
  const std::vector<Text> texts = ReadTexts(dir);
  ASSERT_FALSE(texts.empty());

  v1::GetModelRequest get;
  v1::Model info;
  auto models = server.models();
  v1::ListModelsResponse listed;
  ASSERT_TRUE(models->ListModels(ContextWithTimeout(absl::Seconds(10)).get(), {}, &listed).ok());
  ASSERT_EQ(listed.models_size(), 1);
  info = listed.models(0);
  EXPECT_EQ(info.family(), fixture.architecture);
  EXPECT_EQ(info.tokenizer(), fixture.tokenizer);

  for (size_t i = 0; i < texts.size(); ++i) {
    const Text& t = texts[i];
    SCOPED_TRACE("text " + std::to_string(i));
    // Tokenize, with and without the special tokens.
    for (bool special : {false, true}) {
      v1::TokenizeRequest request;
      request.set_text(t.text);
      request.set_add_special_tokens(special);
      v1::TokenizeResponse response;
      ASSERT_TRUE(generation->Tokenize(ContextWithTimeout(absl::Seconds(10)).get(), request,
                                       &response).ok());
      EXPECT_EQ(std::vector<int>(response.ids().begin(), response.ids().end()),
                special ? t.with_special : t.plain);
    }
    // Score the reference ids: every next-token log-prob.
    v1::ScoreRequest score;
    for (int id : t.scored) score.add_token_ids(id);
    score.set_token_logprobs(true);
    v1::ScoreResponse scored;
    grpc::Status status =
        generation->Score(ContextWithTimeout(absl::Seconds(30)).get(), score, &scored);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(scored.logprobs_size(), static_cast<int>(t.scored.size()) - 1);
    double worst = 0;
    for (int k = 0; k < scored.logprobs_size(); ++k) {
      worst = std::max(worst, std::abs(scored.logprobs(k) - t.next_logprob[k].item<double>()));
    }
    EXPECT_LT(worst, 1e-4);
  }
  // Greedy continuations (a few texts: each is a whole request).
  for (size_t i = 0; i < texts.size() && i < 4; ++i) {
    const Text& t = texts[i];
    v1::GenerateRequest request;
    for (int k = 0; k < t.greedy_prompt_tokens; ++k) request.add_prompt_token_ids(t.scored[k]);
    request.set_max_new_tokens(static_cast<int>(t.greedy.size()));
    request.mutable_sampling()->set_temperature(0);
    request.set_stop_at_eos(false);
    testing::StreamResult result = GenerateAll(*generation, request);
    ASSERT_TRUE(result.status.ok()) << result.status.error_message();
    std::vector<int> got;
    for (const v1::GenerateResponse& chunk : result.chunks) {
      for (const v1::Token& token : chunk.tokens()) got.push_back(token.id());
    }
    EXPECT_EQ(got, t.greedy) << "text " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfModelsTest, ::testing::ValuesIn(kFixtures),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace mnemo::server
