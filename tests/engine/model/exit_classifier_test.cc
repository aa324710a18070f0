// The CALM exit classifier: its file round-trips and is tied to the weights it was trained
// for, the model loads it from its directory, and ForwardWithExit exits on it (and on hidden
// saturation) exactly where the confidence first reaches the threshold, independently of how
// the text is chunked.
#include "engine/model/exit_classifier.h"

#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/batch_decoder.h"
#include "engine/model/exit_confidence.h"
#include "engine/model/model.h"
#include "tests/engine/model/exit_test_util.h"
#include "tests/engine/tiny_model.h"

namespace mnemo::model {
namespace {

namespace fs = std::filesystem;
using ::mnemo::testing::FirstLayerConfidences;
using ::mnemo::testing::Quantile;
using ::mnemo::testing::MaxDiff;
using ::mnemo::testing::RandomBytes;
using ::mnemo::testing::RandomExitClassifier;

ModelConfig Config() { return ::mnemo::testing::TinyMemoryModelConfig(Compression::kConv); }

class ExitClassifierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mnemo_exit_classifier_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    model_ = Model::Random(Config(), 7);
    ASSERT_TRUE(model_->Save(dir_.string()).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string ClassifierPath() const { return (dir_ / kExitClassifierFile).string(); }

  std::unique_ptr<Model> model_;
  fs::path dir_;
};

TEST_F(ExitClassifierTest, SavesAndLoadsWithTheModel) {
  ExitClassifier classifier = RandomExitClassifier(Config(), 1);
  const std::string checksum = WeightsChecksum(*model_->transformer());
  ASSERT_TRUE(SaveExitClassifier(ClassifierPath(), *classifier, checksum,
                                 {{"mnemo_training", "{\"note\": 1}"}})
                  .ok());
  auto loaded = Model::Load(dir_.string(), {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const ExitClassifierImpl* c = (*loaded)->exit_classifier();
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(torch::equal(c->weight(), classifier->weight()));
  EXPECT_TRUE(torch::equal(c->bias(), classifier->bias()));
  EXPECT_TRUE((*loaded)->CheckExitMeasure(ExitMeasure::kClassifier).ok());
  auto metadata = ReadExitClassifierMetadata(ClassifierPath());
  ASSERT_TRUE(metadata.ok());
  EXPECT_EQ(metadata->at("mnemo_training"), "{\"note\": 1}");
  EXPECT_EQ(metadata->at("mnemo_weights_checksum"), checksum);

  // The same confidences, and the same exits, from the loaded model as from the original.
  model_->SetExitClassifier(classifier);
  std::vector<int> tokens = RandomBytes(50, 3);
  auto m1 = model_->NewMemory(), m2 = (*loaded)->NewMemory();
  auto a = model_->ForwardWithExit(tokens, m1, 0.6f, ExitMeasure::kClassifier);
  auto b = (*loaded)->ForwardWithExit(tokens, m2, 0.6f, ExitMeasure::kClassifier);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->exit_layers, b->exit_layers);
  EXPECT_TRUE(torch::equal(a->logprobs, b->logprobs));
}

TEST_F(ExitClassifierTest, ChecksumFollowsTheWeights) {
  auto loaded = Model::Load(dir_.string(), {});
  ASSERT_TRUE(loaded.ok());
  const std::string checksum = WeightsChecksum(*model_->transformer());
  EXPECT_EQ(checksum.size(), 16u);
  EXPECT_EQ(WeightsChecksum(*(*loaded)->transformer()), checksum);
  EXPECT_NE(WeightsChecksum(*Model::Random(Config(), 8)->transformer()), checksum);
}

TEST_F(ExitClassifierTest, RefusesAClassifierTrainedForOtherWeights) {
  auto other = Model::Random(Config(), 8);
  ASSERT_TRUE(SaveExitClassifier(ClassifierPath(), *RandomExitClassifier(Config(), 1),
                                 WeightsChecksum(*other->transformer()))
                  .ok());
  absl::Status s = Model::Load(dir_.string(), {}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find(kExitClassifierFile), std::string::npos) << s;
  EXPECT_NE(s.message().find("mnemo-train --exit_classifier"), std::string::npos) << s;
}

TEST_F(ExitClassifierTest, RefusesWrongShapes) {
  ModelConfig deeper = Config();
  deeper.n_layers = 4;
  ASSERT_TRUE(SaveExitClassifier(ClassifierPath(), *RandomExitClassifier(deeper, 1),
                                 WeightsChecksum(*model_->transformer()))
                  .ok());
  absl::Status s = Model::Load(dir_.string(), {}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("has shape [3"), std::string::npos) << s;
  EXPECT_NE(s.message().find("the model needs [2"), std::string::npos) << s;
}

TEST_F(ExitClassifierTest, DefaultMeasureClassifierNeedsTheFile) {
  ModelConfig config = Config();
  config.exit_measure = ExitMeasure::kClassifier;
  std::ofstream(dir_ / "config.json", std::ios::trunc) << ModelConfigToJson(config);
  absl::Status s = Model::Load(dir_.string(), {}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("exit_measure"), std::string::npos) << s;
  ASSERT_TRUE(SaveExitClassifier(ClassifierPath(), *RandomExitClassifier(Config(), 1),
                                 WeightsChecksum(*model_->transformer()))
                  .ok());
  auto loaded = Model::Load(dir_.string(), {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->config().exit_measure, ExitMeasure::kClassifier);
}

TEST_F(ExitClassifierTest, ModelWithoutClassifierRefusesTheMeasure) {
  EXPECT_EQ(model_->exit_classifier(), nullptr);
  auto memory = model_->NewMemory();
  auto out = model_->ForwardWithExit(RandomBytes(5, 1), memory, 0.5f, ExitMeasure::kClassifier);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition) << out.status();
  EXPECT_NE(out.status().message().find("mnemo-train --exit_classifier"), std::string::npos);
  EXPECT_EQ(memory.next_position(), 0);

  BatchDecoder decoder(*model_);
  auto other = model_->NewMemory();
  DecodeRow softmax{65, &other, 0.5f};
  DecodeRow classifier{66, &memory, 0.5f, false, ExitMeasure::kClassifier};
  auto step = decoder.Step(std::vector<DecodeRow>{softmax, classifier});
  EXPECT_EQ(step.status().code(), absl::StatusCode::kInvalidArgument) << step.status();
  EXPECT_NE(step.status().message().find("row 1"), std::string::npos) << step.status();
  EXPECT_EQ(other.next_position(), 0);
}

// Stepping token by token: before a token exits, its states are the full pass's, so its exit
// layer is the first i < L whose confidence (computed here by hand from a full-depth pass on
// a clone of the memory) reaches the threshold.
class ExitMeasureTest : public ::testing::TestWithParam<ExitMeasure> {};

TEST_P(ExitMeasureTest, ExitsWhereTheConfidenceFirstReachesTheThreshold) {
  auto model = Model::Random(Config(), 7);
  model->SetExitClassifier(RandomExitClassifier(Config(), 2));
  const ExitMeasure measure = GetParam();
  const int layers = model->config().n_layers;
  std::vector<int> tokens = RandomBytes(40, 5);
  const std::vector<float> confidences = FirstLayerConfidences(*model, measure, tokens);
  int early = 0, full = 0;
  for (double q : {0.2, 0.5, 0.8}) {
    const float threshold = Quantile(confidences, q);
    auto memory = model->NewMemory();
    for (int token : tokens) {
      int expected = layers;
      {
        c10::InferenceMode guard;
        memory::SessionMemory clone = memory.Clone();
        std::vector<torch::Tensor> outputs;
        torch::Tensor ids = torch::tensor({static_cast<int64_t>(token)}).view({1, 1});
        model->transformer()->forward(ids, clone, &outputs);
        torch::Tensor previous = model->transformer()->Embed(ids);
        for (int i = 0; i + 1 < layers; ++i) {
          const float confidence = ExitConfidence(measure, *model->transformer(),
                                                  model->exit_classifier(), i, outputs[i], previous)
                                       .item<float>();
          if (confidence >= threshold) {
            expected = i + 1;
            break;
          }
          previous = outputs[i];
        }
      }
      auto out = model->ForwardWithExit({token}, memory, threshold, measure);
      ASSERT_TRUE(out.ok()) << out.status();
      ASSERT_EQ(out->exit_layers[0], expected) << "threshold " << threshold;
      (expected < layers ? early : full)++;
    }
  }
  EXPECT_GT(early, 10) << "too few early exits: the test shows little";
  EXPECT_GT(full, 10) << "too few full-depth tokens: the test shows little";
}

TEST_P(ExitMeasureTest, StatePropagationIsIndependentOfChunking) {
  auto model = Model::Random(Config(), 9);
  model->SetExitClassifier(RandomExitClassifier(Config(), 3));
  const ExitMeasure measure = GetParam();
  std::vector<int> tokens = RandomBytes(100, 4);
  // The threshold that exits about half the tokens early.
  const std::vector<float> confidences = FirstLayerConfidences(*model, measure, tokens);
  float threshold = 0.5f;
  int best_gap = 1 << 30;
  for (double q = 0.05; q < 1.0; q += 0.05) {
    const float candidate = Quantile(confidences, q);
    auto memory = model->NewMemory();
    auto trial = model->ForwardWithExit(tokens, memory, candidate, measure);
    ASSERT_TRUE(trial.ok());
    int early = 0;
    for (int layer : trial->exit_layers) early += layer < 3;
    if (std::abs(early - 50) < best_gap) {
      best_gap = std::abs(early - 50);
      threshold = candidate;
    }
  }
  auto whole = model->NewMemory();
  auto once = model->ForwardWithExit(tokens, whole, threshold, measure);
  ASSERT_TRUE(once.ok());
  int early = 0;
  for (int layer : once->exit_layers) early += layer < 3;
  ASSERT_GT(early, 15) << "no threshold mixes early and full-depth exits";
  ASSERT_LT(early, 85) << "no threshold mixes early and full-depth exits";
  auto stepwise = model->NewMemory();
  std::vector<torch::Tensor> rows;
  std::vector<int> layers;
  for (size_t i = 0; i < tokens.size(); ++i) {
    auto step = model->ForwardWithExit(absl::MakeConstSpan(tokens).subspan(i, 1), stepwise,
                                       threshold, measure);
    ASSERT_TRUE(step.ok());
    rows.push_back(step->logprobs);
    layers.push_back(step->exit_layers[0]);
  }
  EXPECT_EQ(layers, once->exit_layers);
  EXPECT_LT(MaxDiff(torch::cat(rows, 0), once->logprobs), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Measures, ExitMeasureTest,
                         ::testing::Values(ExitMeasure::kSoftmaxResponse,
                                           ExitMeasure::kHiddenSaturation,
                                           ExitMeasure::kClassifier),
                         [](const ::testing::TestParamInfo<ExitMeasure>& info) {
                           return std::string(
                               info.param == ExitMeasure::kSoftmaxResponse    ? "Softmax"
                               : info.param == ExitMeasure::kHiddenSaturation ? "Saturation"
                                                                              : "Classifier");
                         });

}  // namespace
}  // namespace mnemo::model
