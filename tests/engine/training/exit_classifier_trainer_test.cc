// The exit classifier's training: examples carry CALM's consistency labels, fitting lowers the
// held-out cross-entropy below the best constant guess, and the whole job trains on the model's
// training files only and writes a file the model loads.
#include "engine/training/exit_classifier_trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engine/model/exit_classifier.h"
#include "engine/model/model.h"
#include "engine/training/exit_examples.h"
#include "tests/engine/tiny_model.h"
#include "tests/engine/training/training_test_util.h"

namespace mnemo::training {
namespace {

namespace fs = std::filesystem;

model::ModelConfig Config() {
  model::ModelConfig c = ::mnemo::testing::TinyModelConfig();
  c.n_layers = 3;
  c.seg_len = 32;
  c.mem_len = 32;
  return c;
}

// Random weights give nearly uniform heads; a sharper final norm makes the early layers' greedy
// tokens disagree with the last layer's at a share of positions that depends on the state.
std::unique_ptr<model::Model> SharpModel() {
  auto model = model::Model::Random(Config(), 21);
  torch::NoGradGuard no_grad;
  auto params = model->transformer()->named_parameters();
  params["final_norm.weight"].mul_(12.0);
  params["final_norm.bias"].mul_(12.0);
  return model;
}

// Text with structure (words from a small vocabulary), BOS first.
std::vector<int> Words(int n, uint32_t seed) {
  static const char* kWords[] = {"def ",    "return ", "self", ".",   "(", ")",
                                 ":\n    ", "x",       "y",    " = ", "0", "1",
                                 "if ",     "for ",    "in ",  ", ",  "\n"};
  std::mt19937 rng(seed);
  std::vector<int> tokens = {model::kBosId};
  while (static_cast<int>(tokens.size()) < n) {
    for (const char* c = kWords[rng() % (sizeof(kWords) / sizeof(kWords[0]))]; *c; ++c) {
      tokens.push_back(static_cast<unsigned char>(*c));
    }
  }
  tokens.resize(n);
  return tokens;
}

TEST(ExitExamplesTest, LabelsAreAgreementWithTheLastLayer) {
  auto model = SharpModel();
  model::ExitClassifier classifier(2, Config().d_model, Config().layer_norm_eps);
  const std::vector<int> tokens = Words(70, 1);
  auto examples = CollectExitExamples(*model, *classifier, tokens);
  ASSERT_TRUE(examples.ok()) << examples.status();
  ASSERT_EQ(examples->size(), 70);
  EXPECT_EQ(examples->features.sizes(), (std::vector<int64_t>{70, 2, Config().d_model}));
  // Reference: every layer's greedy token from a plain forward pass.
  torch::NoGradGuard no_grad;
  auto memory = model->transformer()->NewMemory(1, torch::kCPU);
  std::vector<torch::Tensor> outputs;
  std::vector<int64_t> ids(tokens.begin(), tokens.end());
  std::vector<torch::Tensor> argmax(3);
  for (size_t start = 0; start < ids.size(); start += 32) {
    const size_t n = std::min<size_t>(32, ids.size() - start);
    std::vector<int64_t> part(ids.begin() + start, ids.begin() + start + n);
    std::vector<torch::Tensor> layers;
    model->transformer()->forward(torch::tensor(part).view({1, -1}), memory, &layers);
    for (int i = 0; i < 3; ++i) {
      torch::Tensor a = model->transformer()->Logits(layers[i])[0].argmax(-1);
      argmax[i] = argmax[i].defined() ? torch::cat({argmax[i], a}) : a;
    }
  }
  for (int i = 0; i < 2; ++i) {
    torch::Tensor want = argmax[i].eq(argmax[2]).to(torch::kFloat32);
    EXPECT_TRUE(torch::equal(examples->labels.select(1, i), want)) << "layer " << i + 1;
  }
  // Both kinds of label occur (most positions agree: a random model's layers change little).
  const double rate = examples->labels.mean().item<double>();
  EXPECT_GT(rate, 0.5);
  EXPECT_LT(rate, 0.99);
  // A random share keeps about that share of positions.
  auto half = CollectExitExamples(*model, *classifier, Words(400, 2), 0.5, 3);
  ASSERT_TRUE(half.ok());
  EXPECT_GT(half->size(), 150);
  EXPECT_LT(half->size(), 250);
}

TEST(ExitExamplesTest, FittingBeatsTheBestConstantOnHeldOutText) {
  auto model = SharpModel();
  model::ExitClassifier classifier(2, Config().d_model, Config().layer_norm_eps);
  std::vector<ExitExamples> train_parts, test_parts;
  for (uint32_t seed = 0; seed < 12; ++seed) {
    auto part = CollectExitExamples(*model, *classifier, Words(300, 100 + seed));
    ASSERT_TRUE(part.ok()) << part.status();
    train_parts.push_back(*part);
  }
  for (uint32_t seed = 0; seed < 4; ++seed) {
    auto part = CollectExitExamples(*model, *classifier, Words(300, 900 + seed));
    ASSERT_TRUE(part.ok()) << part.status();
    test_parts.push_back(*part);
  }
  const ExitExamples train = ConcatExitExamples(train_parts);
  const ExitExamples test = ConcatExitExamples(test_parts);
  const std::vector<double> base = PositiveRates(train);
  // Untrained (all zeros): p = 0.5 everywhere, BCE ln 2.
  for (const ExitLayerMetrics& m : EvaluateExitClassifier(*classifier, test, base)) {
    EXPECT_NEAR(m.bce, std::log(2.0), 1e-6);
  }
  ExitFitOptions options;
  options.epochs = 20;
  options.batch = 256;
  options.lr = 1e-2;
  FitExitClassifier(*classifier, train, options);
  for (const ExitLayerMetrics& m : EvaluateExitClassifier(*classifier, test, base)) {
    EXPECT_LT(m.bce, m.base_bce - 0.02) << "layer " << m.layer;
    EXPECT_GT(m.auc, 0.65) << "layer " << m.layer;
    EXPECT_GE(m.accuracy, std::max(m.positive_rate, 1 - m.positive_rate) - 0.01)
        << "layer " << m.layer;
  }
}

TEST(ExitExamplesTest, RocAucCountsTiesAsHalf) {
  EXPECT_DOUBLE_EQ(RocAuc(torch::tensor({0.1, 0.2, 0.8, 0.9}), torch::tensor({0., 0., 1., 1.})),
                   1.0);
  EXPECT_DOUBLE_EQ(RocAuc(torch::tensor({0.9, 0.8, 0.2, 0.1}), torch::tensor({0., 0., 1., 1.})),
                   0.0);
  EXPECT_DOUBLE_EQ(RocAuc(torch::tensor({0.5, 0.5}), torch::tensor({0., 1.})), 0.5);
  EXPECT_DOUBLE_EQ(RocAuc(torch::tensor({0.1, 0.4, 0.35, 0.8}), torch::tensor({0., 0., 1., 1.})),
                   0.75);
  EXPECT_DOUBLE_EQ(RocAuc(torch::tensor({0.1, 0.4}), torch::tensor({1., 1.})), 0.5);
}

// A model directory with a split.json holding out `held_out` of the corpus files.
class TrainExitClassifierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 10; ++i) {
      std::string text;
      for (int t : Words(300, 40 + i)) {
        if (t < 256) text.push_back(static_cast<char>(t));
      }
      files_.push_back(corpus_.Write("pkg/m" + std::to_string(i) + ".py", text));
    }
    ASSERT_TRUE(SharpModel()->Save(model_.path()).ok());
  }

  void WriteSplit(const std::vector<std::string>& held_out) {
    nlohmann::json split = {{"root", corpus_.path()}, {"validation", held_out}};
    std::ofstream(fs::path(model_.path()) / "split.json") << split.dump(2);
  }

  ExitClassifierTrainerOptions Options() {
    ExitClassifierTrainerOptions o;
    o.model_dir = model_.path();
    o.fit_files = 100;
    o.holdout_files = 100;
    o.holdout_fraction = 0.3;
    o.bytes_per_file = 256;
    o.min_bytes = 64;
    o.fit.epochs = 2;
    o.threads = 1;
    return o;
  }

  ScratchDir corpus_, model_;
  std::vector<std::string> files_;
};

TEST_F(TrainExitClassifierTest, UsesOnlyTrainingFilesAndWritesAClassifierTheModelLoads) {
  WriteSplit({files_[1], files_[4], files_[7]});
  absl::StatusOr<ExitClassifierReport> report = TrainExitClassifier(Options());
  ASSERT_TRUE(report.ok()) << report.status();
  // Every file but the three held out, split between fit and hold-out; none of the three.
  EXPECT_EQ(report->fit_texts + report->holdout_texts, 7);
  EXPECT_GT(report->fit_texts, 0);
  EXPECT_GT(report->holdout_texts, 0);
  ASSERT_EQ(report->layers.size(), 2u);
  EXPECT_EQ(report->path, (fs::path(model_.path()) / model::kExitClassifierFile).string());
  auto loaded = model::Model::Load(model_.path(), {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_NE((*loaded)->exit_classifier(), nullptr);
  auto metadata = model::ReadExitClassifierMetadata(report->path);
  ASSERT_TRUE(metadata.ok());
  nlohmann::json summary = nlohmann::json::parse(metadata->at("mnemo_training"));
  EXPECT_EQ(summary["fit_texts"], report->fit_texts);
  EXPECT_EQ(summary["holdout"].size(), 2u);
  EXPECT_NE(FormatExitClassifierReport(*report).find("| 2 |"), std::string::npos);
}

TEST_F(TrainExitClassifierTest, RefusesAModelWithoutSplit) {
  absl::StatusOr<ExitClassifierReport> report = TrainExitClassifier(Options());
  EXPECT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition) << report.status();
  EXPECT_NE(report.status().message().find("split.json"), std::string::npos);
  EXPECT_FALSE(fs::exists(fs::path(model_.path()) / model::kExitClassifierFile));
}

}  // namespace
}  // namespace mnemo::training
