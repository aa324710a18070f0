// Trainer end to end on a tiny model: it learns, it is deterministic, it resumes, and what it
// writes loads into the inference engine.
#include "engine/training/trainer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/model/model.h"
#include "tests/engine/training/training_test_util.h"

namespace mnemo::training {
namespace {

TrainerOptions TinyOptions(const ScratchDir& corpus, const std::string& out) {
  TrainerOptions o;
  o.model.n_layers = 2;
  o.model.d_model = 32;
  o.model.n_heads = 2;
  o.model.d_head = 16;
  o.model.d_ff = 64;
  o.model.seg_len = 32;
  o.model.mem_len = 32;
  o.model.cmem_len = 8;
  o.model.cmem_rate = 4;
  o.model.compression = model::Compression::kConv;
  o.model.knn_layer = 1;
  o.model.knn_mem_len = 64;
  o.model.knn_topk = 4;
  o.corpus_dir = corpus.path();
  o.corpus.validation_fraction = 0.25;
  o.out_dir = out;
  o.threads = 1;
  o.batch = 2;
  o.steps = 60;
  o.lr = 3e-3;
  o.warmup_steps = 5;
  o.eval_every = 0;
  o.eval_files = 2;
  o.eval_bytes = 512;
  o.checkpoint_every = 30;
  o.save_bf16 = false;
  return o;
}

void WriteCorpus(const ScratchDir& dir) {
  // Highly regular text: a tiny model must get well below the 8 bits/byte of a uniform guess.
  std::mt19937 rng(1);
  for (int f = 0; f < 16; ++f) {
    std::string text;
    for (int line = 0; line < 40; ++line) {
      text += "def f" + std::to_string(rng() % 10) + "(x):\n    return x + " + std::to_string(rng() % 10) + "\n";
    }
    dir.Write("m" + std::to_string(f) + ".py", text);
  }
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST(TrainerTest, LearnsAndWritesALoadableModelWithCard) {
  ScratchDir corpus, out;
  WriteCorpus(corpus);
  TrainerOptions o = TinyOptions(corpus, out.path() + "/model");
  ASSERT_TRUE(Train(o).ok());
  auto card = ReadJson(o.out_dir + "/training_card.json");
  EXPECT_EQ(card["steps"], 60);
  EXPECT_GT(card["tokens"].get<int64_t>(), 60 * 2 * 20);
  const double bpb = card["validation"].back()["bpb"];
  EXPECT_LT(bpb, 4.0) << "a tiny model should learn this regular corpus";
  auto split = ReadJson(o.out_dir + "/split.json");
  EXPECT_FALSE(split["validation"].empty());
  auto loaded = model::Model::Load(o.out_dir, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->config().knn_layer, 1);
}

TEST(TrainerTest, SameSeedSameModel) {
  ScratchDir corpus, out;
  WriteCorpus(corpus);
  TrainerOptions a = TinyOptions(corpus, out.path() + "/a"), b = TinyOptions(corpus, out.path() + "/b");
  a.steps = b.steps = 12;
  ASSERT_TRUE(Train(a).ok());
  ASSERT_TRUE(Train(b).ok());
  auto ma = model::Model::Load(a.out_dir, {}), mb = model::Model::Load(b.out_dir, {});
  ASSERT_TRUE(ma.ok() && mb.ok());
  std::vector<int> tokens = {model::kBosId, 'd', 'e', 'f'};
  auto mem_a = (*ma)->NewMemory(), mem_b = (*mb)->NewMemory();
  torch::Tensor la = *(*ma)->Forward(tokens, mem_a), lb = *(*mb)->Forward(tokens, mem_b);
  EXPECT_TRUE(torch::equal(la, lb)) << "max difference " << (la - lb).abs().max().item<float>();
}

TEST(TrainerTest, ResumesFromCheckpoint) {
  ScratchDir corpus, out;
  WriteCorpus(corpus);
  TrainerOptions o = TinyOptions(corpus, out.path() + "/model");
  o.steps = 30;
  ASSERT_TRUE(Train(o).ok());
  o.steps = 45;
  o.resume = true;
  ASSERT_TRUE(Train(o).ok());
  auto state = ReadJson(o.out_dir + "/checkpoint/state.json");
  EXPECT_EQ(state["step"], 45);
  auto card = ReadJson(o.out_dir + "/training_card.json");
  EXPECT_EQ(card["steps"], 45);
}

TEST(TrainerTest, BadInputsAreErrors) {
  ScratchDir corpus, out;
  TrainerOptions o = TinyOptions(corpus, out.path() + "/model");
  o.corpus_dir = "/nonexistent/mnemo";
  EXPECT_EQ(Train(o).code(), absl::StatusCode::kNotFound);
  o = TinyOptions(corpus, out.path() + "/model");
  o.model.seg_len = 30;  // not a multiple of cmem_rate 4
  EXPECT_EQ(Train(o).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mnemo::training
