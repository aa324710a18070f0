// The Hugging Face families against transformers: every fixture of tests/data/hf (tiny
// checkpoints saved by transformers 5.17 with what transformers computed for them, see
// ../shared/fixtures/hf/README.md) through Model::Forward, split and whole, the batched decoder
// with rows of different lengths, and greedy decoding token by token.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/model/batch_decoder.h"
#include "engine/model/family.h"
#include "engine/model/model.h"
#include "engine/model/safetensors.h"

namespace mnemo::model {
namespace {

constexpr double kTolerance = 1e-4;

std::string FixtureDir(const std::string& name) {
  const char* source = std::getenv("MNEMO_SOURCE_DIR");
  return std::string(source != nullptr ? source : ".") + "/tests/data/hf/" + name;
}

struct Text {
  std::vector<int> ids;             // t{i}.ids: ids_with_special, up to 320
  torch::Tensor next_logprob;       // [n - 1]
  torch::Tensor last_logits;        // [V]
  int greedy_prompt_tokens = 0;
  std::vector<int> greedy;          // 24 ids
};

std::vector<Text> ReadTexts(const std::string& dir) {
  std::ifstream in(dir + "/reference_public.json");
  nlohmann::json j = nlohmann::json::parse(in);
  auto file = SafetensorsFile::Open(dir + "/reference_public.safetensors");
  EXPECT_TRUE(file.ok()) << file.status();
  std::vector<Text> texts;
  for (const auto& t : j.at("texts")) {
    const int i = t.at("index").get<int>();
    Text text;
    torch::Tensor ids = (*file)->ReadFloat("t" + std::to_string(i) + ".ids")->to(torch::kInt64);
    EXPECT_EQ(ids.size(0), t.at("scored_tokens").get<int64_t>());
    for (int64_t k = 0; k < ids.size(0); ++k) text.ids.push_back(static_cast<int>(ids[k].item<int64_t>()));
    text.next_logprob = *(*file)->ReadFloat("t" + std::to_string(i) + ".next_logprob");
    text.last_logits = *(*file)->ReadFloat("t" + std::to_string(i) + ".last_logits");
    text.greedy_prompt_tokens = t.at("greedy_prompt_tokens").get<int>();
    text.greedy = t.at("greedy").get<std::vector<int>>();
    texts.push_back(std::move(text));
  }
  return texts;
}

class HfParityTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    torch::set_num_threads(1);
    dir_ = FixtureDir(GetParam());
    auto model = Model::Load(dir_, {});
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    texts_ = ReadTexts(dir_);
    ASSERT_FALSE(texts_.empty());
  }

  // Next-token log-probs of `ids` from a fresh memory, fed in pieces of `piece` tokens.
  torch::Tensor LogProbs(const std::vector<int>& ids, size_t piece) {
    memory::SessionMemory memory = model_->NewMemory();
    std::vector<torch::Tensor> parts;
    for (size_t start = 0; start < ids.size(); start += piece) {
      const size_t n = std::min(piece, ids.size() - start);
      auto lp = model_->Forward(absl::MakeConstSpan(ids).subspan(start, n), memory);
      EXPECT_TRUE(lp.ok()) << lp.status();
      parts.push_back(*lp);
    }
    return torch::cat(parts, 0);
  }

  // Largest |ours - reference| over the next-token log-probs of text t.
  static double NextTokenError(const torch::Tensor& logprobs, const Text& t) {
    const int64_t n = static_cast<int64_t>(t.ids.size());
    torch::Tensor next = torch::tensor(std::vector<int64_t>(t.ids.begin() + 1, t.ids.end()));
    torch::Tensor ours = logprobs.narrow(0, 0, n - 1).gather(1, next.unsqueeze(1)).squeeze(1);
    return (ours - t.next_logprob).abs().max().item<double>();
  }

  void BatchedDecodeAgrees(AttentionLayout layout);

  std::string dir_;
  std::unique_ptr<Model> model_;
  std::vector<Text> texts_;
};

TEST_P(HfParityTest, NextTokenLogProbsMatchTransformers) {
  for (size_t i = 0; i < texts_.size(); ++i) {
    const Text& t = texts_[i];
    EXPECT_LT(NextTokenError(LogProbs(t.ids, t.ids.size()), t), kTolerance) << "text " << i;
  }
}

TEST_P(HfParityTest, SplittingTheSequenceChangesNothing) {
  for (size_t i = 0; i < texts_.size(); ++i) {
    const Text& t = texts_[i];
    torch::Tensor whole = LogProbs(t.ids, t.ids.size());
    for (size_t piece : {1, 7, 50}) {
      EXPECT_LT((LogProbs(t.ids, piece) - whole).abs().max().item<double>(), 1e-5)
          << "text " << i << " in pieces of " << piece;
    }
    if (i >= 2) break;  // token by token is slow: three texts show it
  }
}

TEST_P(HfParityTest, LastLogitsMatchTransformers) {
  for (size_t i = 0; i < texts_.size(); ++i) {
    const Text& t = texts_[i];
    memory::SessionMemory memory = model_->NewMemory();
    c10::InferenceMode inference;
    torch::Tensor hidden;
    const int64_t seg = model_->config().seg_len;
    std::vector<int64_t> ids(t.ids.begin(), t.ids.end());
    torch::Tensor all = torch::tensor(ids).view({1, -1});
    for (int64_t start = 0; start < all.size(1); start += seg) {
      hidden = model_->network().ForwardSegment(
          all.narrow(1, start, std::min(seg, all.size(1) - start)), memory, nullptr);
    }
    torch::Tensor last = model_->network().Logits(hidden.select(1, hidden.size(1) - 1))[0];
    EXPECT_LT((last - t.last_logits).abs().max().item<double>(), kTolerance) << "text " << i;
  }
}

TEST_P(HfParityTest, GreedyContinuationMatchesTransformers) {
  for (size_t i = 0; i < texts_.size(); ++i) {
    const Text& t = texts_[i];
    memory::SessionMemory memory = model_->NewMemory();
    std::vector<int> prompt(t.ids.begin(), t.ids.begin() + t.greedy_prompt_tokens);
    auto lp = model_->Forward(prompt, memory, Outputs::kLast);
    ASSERT_TRUE(lp.ok()) << lp.status();
    std::vector<int> got;
    for (size_t k = 0; k < t.greedy.size(); ++k) {
      const int next = static_cast<int>(lp->argmax(-1).item<int64_t>());
      got.push_back(next);
      std::vector<int> one = {next};
      lp = model_->Forward(one, memory, Outputs::kLast);
      ASSERT_TRUE(lp.ok()) << lp.status();
    }
    EXPECT_EQ(got, t.greedy) << "text " << i;
  }
}

// Rows of different lengths in one step: each row i has seen a different prefix of its text;
// every step feeds each row its next reference id and checks the next-token log-prob.
// kPerRow runs the host kernel (grouped heads, rings read in place), kPerRowOps the reference.
TEST_P(HfParityTest, BatchedDecodeMatchesTransformers) {
  for (AttentionLayout layout : {AttentionLayout::kPerRow, AttentionLayout::kPerRowOps}) {
    SCOPED_TRACE(layout == AttentionLayout::kPerRow ? "host kernel" : "reference");
    BatchedDecodeAgrees(layout);
  }
}

void HfParityTest::BatchedDecodeAgrees(AttentionLayout layout) {
  const size_t rows = std::min<size_t>(texts_.size(), 4);
  std::vector<memory::SessionMemory> memories;
  std::vector<size_t> fed;
  for (size_t r = 0; r < rows; ++r) {
    memories.push_back(model_->NewMemory());
    const size_t prefix = 3 + 11 * r;  // different lengths
    ASSERT_TRUE(model_->Forward(absl::MakeConstSpan(texts_[r].ids).subspan(0, prefix),
                                memories.back(), Outputs::kLast)
                    .ok());
    fed.push_back(prefix);
  }
  BatchDecoder decoder(*model_, BatchDecoderOptions{layout});
  double worst = 0;
  for (int step = 0; step < 40; ++step) {
    std::vector<DecodeRow> batch;
    std::vector<size_t> which;
    for (size_t r = 0; r < rows; ++r) {
      if (fed[r] + 1 >= texts_[r].ids.size()) continue;
      DecodeRow row;
      row.token = texts_[r].ids[fed[r]];
      row.memory = &memories[r];
      batch.push_back(row);
      which.push_back(r);
    }
    if (batch.empty()) break;
    auto result = decoder.Step(batch);
    ASSERT_TRUE(result.ok()) << result.status();
    for (size_t b = 0; b < which.size(); ++b) {
      const size_t r = which[b];
      const Text& t = texts_[r];
      const double ours = result->logprobs[b][t.ids[fed[r] + 1]].item<double>();
      const double ref = t.next_logprob[fed[r]].item<double>();
      worst = std::max(worst, std::abs(ours - ref));
      ++fed[r];
    }
  }
  EXPECT_LT(worst, kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfParityTest,
                         ::testing::Values("gpt2", "llama", "mistral", "qwen2", "llama3"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mnemo::model
