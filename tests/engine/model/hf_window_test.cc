// Bounded sessions for the Hugging Face families (--window, --sink_tokens): a window shorter
// than the text slides without changing what the positions inside it compute; sinks stay
// visible after they leave the window; and every way of feeding a sequence (one call, pieces,
// token by token, batched decode rows with the host kernel or the reference) agrees.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "engine/model/batch_decoder.h"
#include "engine/model/model.h"

namespace mnemo::model {
namespace {

std::string FixtureDir(const std::string& name) {
  const char* source = std::getenv("MNEMO_SOURCE_DIR");
  return std::string(source != nullptr ? source : ".") + "/tests/data/hf/" + name;
}

std::unique_ptr<Model> Load(const std::string& name, int window, int sinks) {
  LoadOptions options;
  options.window = window;
  options.sink_tokens = sinks;
  auto model = Model::Load(FixtureDir(name), options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

// A deterministic pseudo-text of n ids in [3, vocab).
std::vector<int> Ids(int n, int vocab, uint64_t seed) {
  std::vector<int> ids;
  uint64_t x = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (int i = 0; i < n; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    ids.push_back(3 + static_cast<int>((x >> 33) % static_cast<uint64_t>(vocab - 3)));
  }
  return ids;
}

torch::Tensor LogProbs(Model& model, const std::vector<int>& ids, size_t piece) {
  memory::SessionMemory memory = model.NewMemory();
  std::vector<torch::Tensor> parts;
  for (size_t start = 0; start < ids.size(); start += piece) {
    const size_t n = std::min(piece, ids.size() - start);
    auto lp = model.Forward(absl::MakeConstSpan(ids).subspan(start, n), memory);
    EXPECT_TRUE(lp.ok()) << lp.status();
    parts.push_back(*lp);
  }
  return torch::cat(parts, 0);
}

// Feeds ids[0, prefix) as a prompt, then the rest one token per decode step (with two other
// rows of other lengths in the same step); returns the log-probs of every position from
// prefix - 1 on, as LogProbs gives them.
torch::Tensor DecodeLogProbs(Model& model, const std::vector<int>& ids, size_t prefix,
                             AttentionLayout layout) {
  memory::SessionMemory memory = model.NewMemory();
  memory::SessionMemory other1 = model.NewMemory(), other2 = model.NewMemory();
  std::vector<int> noise = Ids(200, model.config().vocab_size, 99);
  EXPECT_TRUE(model.Forward(absl::MakeConstSpan(noise).subspan(0, 5), other1).ok());
  EXPECT_TRUE(model.Forward(absl::MakeConstSpan(noise).subspan(0, 60), other2).ok());
  auto first = model.Forward(absl::MakeConstSpan(ids).subspan(0, prefix), memory, Outputs::kLast);
  EXPECT_TRUE(first.ok());
  std::vector<torch::Tensor> rows = {*first};
  BatchDecoder decoder(model, BatchDecoderOptions{layout});
  for (size_t t = prefix; t + 1 < ids.size(); ++t) {
    std::vector<DecodeRow> batch(3);
    batch[0].token = noise[5 + t % 100];
    batch[0].memory = &other1;
    batch[1].token = ids[t];
    batch[1].memory = &memory;
    batch[2].token = noise[60 + t % 100];
    batch[2].memory = &other2;
    auto step = decoder.Step(batch);
    EXPECT_TRUE(step.ok()) << step.status();
    rows.push_back(step->logprobs.narrow(0, 1, 1));
  }
  return torch::cat(rows, 0);
}

TEST(HfWindowTest, InsideTheWindowNothingChanges) {
  auto full = Load("llama", 0, -1);
  auto windowed = Load("llama", 24, -1);
  std::vector<int> ids = Ids(100, full->config().vocab_size, 1);
  torch::Tensor a = LogProbs(*full, ids, ids.size());
  torch::Tensor b = LogProbs(*windowed, ids, ids.size());
  // Positions 0..23 see everything before them under both; later ones differ.
  EXPECT_LT((a.narrow(0, 0, 24) - b.narrow(0, 0, 24)).abs().max().item<double>(), 1e-5);
  EXPECT_GT((a.narrow(0, 30, 70) - b.narrow(0, 30, 70)).abs().max().item<double>(), 1e-3);
  EXPECT_EQ(windowed->NewMemory().shape().mem_len, 23);
}

TEST(HfWindowTest, SinksAreSeenOnlyOnceTheyLeaveTheWindow) {
  auto windowed = Load("llama", 24, -1);
  auto sinks = Load("llama", 24, 4);
  std::vector<int> ids = Ids(120, sinks->config().vocab_size, 2);
  torch::Tensor a = LogProbs(*windowed, ids, ids.size());
  torch::Tensor b = LogProbs(*sinks, ids, ids.size());
  // Query t sees sink 0 once t > mem_len = 23.
  EXPECT_LT((a.narrow(0, 0, 24) - b.narrow(0, 0, 24)).abs().max().item<double>(), 1e-5);
  EXPECT_GT((a.narrow(0, 24, 96) - b.narrow(0, 24, 96)).abs().max().item<double>(), 1e-3);
}

TEST(HfWindowTest, EveryWayOfFeedingAgrees) {
  for (const char* name : {"llama", "mistral", "qwen2", "llama3", "gpt2"}) {
    for (int sinks : {-1, 4}) {
      SCOPED_TRACE(std::string(name) + (sinks > 0 ? " with sinks" : " window only"));
      auto model = Load(name, 20, sinks);
      std::vector<int> ids = Ids(90, model->config().vocab_size, 3);
      torch::Tensor whole = LogProbs(*model, ids, ids.size());
      for (size_t piece : {1, 7, 33}) {
        EXPECT_LT((LogProbs(*model, ids, piece) - whole).abs().max().item<double>(), 1e-4)
            << "pieces of " << piece;
      }
      const size_t prefix = 9;
      for (AttentionLayout layout : {AttentionLayout::kPerRow, AttentionLayout::kPerRowOps}) {
        torch::Tensor decoded = DecodeLogProbs(*model, ids, prefix, layout);
        EXPECT_LT((decoded - whole.narrow(0, prefix - 1, decoded.size(0))).abs().max().item<double>(),
                  1e-4)
            << (layout == AttentionLayout::kPerRow ? "host kernel" : "reference");
      }
    }
  }
}

TEST(HfWindowTest, RefusesWhatCannotBeServed) {
  LoadOptions options;
  options.window = 100000;
  EXPECT_FALSE(Model::Load(FixtureDir("llama"), options).ok());  // beyond max_position_embeddings
  options.window = 64;
  EXPECT_FALSE(Model::Load(FixtureDir("mistral"), options).ok());  // beyond its sliding_window
  options.window = 8;
  options.sink_tokens = 8;
  EXPECT_FALSE(Model::Load(FixtureDir("llama"), options).ok());  // sinks >= window
}

// GPT-2's positions are a learned table: a sequence ends at n_positions, with a clear error
// from the prompt path and the decode step alike.
TEST(HfWindowTest, LearnedPositionsEndTheSequence) {
  auto model = Load("gpt2", 0, -1);
  const int64_t limit = model->max_sequence();
  ASSERT_EQ(limit, 512);
  std::vector<int> ids = Ids(static_cast<int>(limit) - 1, model->config().vocab_size, 5);
  memory::SessionMemory memory = model->NewMemory();
  ASSERT_TRUE(model->Forward(ids, memory, Outputs::kLast).ok());
  std::vector<int> two = {ids[0], ids[1]};
  auto over = model->Forward(two, memory);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kOutOfRange) << over.status();
  BatchDecoder decoder(*model);
  DecodeRow row;
  row.token = ids[0];
  row.memory = &memory;
  ASSERT_TRUE(decoder.Step({row}).ok());  // position 511, the last
  auto past = decoder.Step({row});
  EXPECT_EQ(past.status().code(), absl::StatusCode::kOutOfRange) << past.status();
}

// With sinks a GPT-2 session streams past n_positions: each token is embedded at its position
// inside the cache (LearnedPosition), so the sequence has no end, and every way of feeding it
// still agrees.
TEST(HfWindowTest, LearnedPositionsStreamWithSinks) {
  auto model = Load("gpt2", 16, 4);
  EXPECT_EQ(model->max_sequence(), -1);
  std::vector<int> ids = Ids(600, model->config().vocab_size, 6);  // past the 512 positions
  torch::Tensor whole = LogProbs(*model, ids, ids.size());
  ASSERT_EQ(whole.size(0), 600);
  EXPECT_TRUE(torch::isfinite(whole).all().item<bool>());
  EXPECT_LT((LogProbs(*model, ids, 37) - whole).abs().max().item<double>(), 1e-4);
  const size_t prefix = 500;  // decode steps from 500 to 599 cross the table's end
  torch::Tensor decoded = DecodeLogProbs(*model, ids, prefix, AttentionLayout::kPerRow);
  EXPECT_LT((decoded - whole.narrow(0, prefix - 1, decoded.size(0))).abs().max().item<double>(),
            1e-4);
  // Once the window is full the cost and the state stop growing: the same ring at 600 as at 60.
  memory::SessionMemory memory = model->NewMemory();
  const int64_t bytes = memory.bytes();
  ASSERT_TRUE(model->Forward(ids, memory, Outputs::kLast).ok());
  EXPECT_EQ(memory.bytes(), bytes);
}

// CALM early exit through the shared final norm and head: a threshold above 1 never exits and
// equals Forward; a threshold below every confidence (-2: cosines reach -1) exits every
// position after the first layer; the batched
// decoder's exits agree with the prompt path's.
TEST(HfWindowTest, EarlyExitWorksThroughTheSharedHead) {
  for (const char* name : {"gpt2", "qwen2"}) {
    SCOPED_TRACE(name);
    auto model = Load(name, 0, -1);
    std::vector<int> ids = Ids(40, model->config().vocab_size, 7);
    torch::Tensor full = LogProbs(*model, ids, ids.size());
    for (ExitMeasure measure : {ExitMeasure::kSoftmaxResponse, ExitMeasure::kHiddenSaturation}) {
      memory::SessionMemory never = model->NewMemory();
      auto late = model->ForwardWithExit(ids, never, 2.0f, measure);
      ASSERT_TRUE(late.ok()) << late.status();
      EXPECT_LT((late->logprobs - full).abs().max().item<double>(), 1e-5);
      for (int layer : late->exit_layers) EXPECT_EQ(layer, model->config().n_layers);
      memory::SessionMemory always = model->NewMemory();
      auto early = model->ForwardWithExit(ids, always, -2.0f, measure);
      ASSERT_TRUE(early.ok()) << early.status();
      for (int layer : early->exit_layers) EXPECT_EQ(layer, 1);
      // Decoding the next token with the same threshold exits at the first layer too.
      BatchDecoder decoder(*model);
      DecodeRow row;
      row.token = ids[0];
      row.memory = &always;
      row.exit_threshold = -2.0f;
      row.exit_measure = measure;
      auto step = decoder.Step({row});
      ASSERT_TRUE(step.ok()) << step.status();
      EXPECT_EQ(step->exit_layers[0], 1);
    }
  }
}

}  // namespace
}  // namespace mnemo::model
