// End to end on a tiny random model: measure agreement, run Learn then Test, check the chosen
// threshold against an independent recomputation and fresh texts, store it in config.json.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "engine/calm/agreement.h"
#include "engine/calm/config_update.h"
#include "engine/calm/learn_then_test.h"
#include "engine/calm/p_values.h"
#include "engine/model/model.h"
#include "nlohmann/json.hpp"
#include "tests/engine/tiny_model.h"

namespace mnemo::calm {
namespace {

namespace fs = std::filesystem;
using ::mnemo::testing::RandomBytes;

model::ModelConfig Config() { return ::mnemo::testing::TinyMemoryModelConfig(); }

std::vector<CalibrationText> Texts(int count, int length, uint32_t seed) {
  std::vector<CalibrationText> texts;
  for (int i = 0; i < count; ++i) {
    texts.push_back(CalibrationText{"text" + std::to_string(i),
                                    RandomBytes(length, seed + static_cast<uint32_t>(i))});
  }
  return texts;
}

// Random weights give flat distributions, so softmax responses are tiny: the candidates span
// "never" to "always" exit on that scale.
const std::vector<float> kCandidates = {2.0f, 3e-2f, 1e-2f, 3e-3f, 1e-3f, 3e-4f,
                                        1e-4f, 3e-5f, 1e-5f, 0.0f};
// Layer 1's greedy byte already matches layer 3's at ~93% of positions on this model.
constexpr double kDelta = 0.05;
constexpr double kEpsilon = 0.1;

TEST(CalibrationTest, ChosenThresholdIsConsistentOnTheCalibrationSetAndFreshTexts) {
  auto model = model::Model::Random(Config(), 11);
  const std::vector<CalibrationText> texts = Texts(150, 32, 100);
  AgreementOptions options;
  options.chunk = 7;  // odd chunks: results must not depend on them
  int64_t progress_positions = 0;
  absl::StatusOr<std::vector<CandidateMeasurement>> measured = MeasureAgreement(
      *model, texts, kCandidates, options,
      [&](const std::string&, int64_t positions) { progress_positions += positions; });
  ASSERT_TRUE(measured.ok()) << measured.status();
  EXPECT_EQ(progress_positions, int64_t{150} * 32 * static_cast<int64_t>(kCandidates.size() + 1));

  // Full depth agrees with itself everywhere.
  EXPECT_DOUBLE_EQ((*measured)[0].MeanRisk(), 0.0);
  EXPECT_DOUBLE_EQ((*measured)[0].MeanExitLayer(), 3.0);
  // Threshold 0 exits everything after layer 1.
  EXPECT_DOUBLE_EQ(measured->back().MeanExitLayer(), 1.0);
  EXPECT_GT(measured->back().MeanRisk(), kDelta);

  LttResult ltt = LearnThenTest(*measured, 3, kDelta, kEpsilon);
  std::string table;
  for (const LttRow& row : ltt.rows) {
    table += "\n  " + std::to_string(row.threshold) + ": layers " +
             std::to_string(row.mean_exit_layer) + " risk " + std::to_string(row.risk) + " p " +
             std::to_string(row.p_value);
  }
  SCOPED_TRACE(table);
  ASSERT_TRUE(ltt.calibrated()) << "no candidate accepted: the test exercises nothing";
  ASSERT_LT(ltt.chosen + 1, static_cast<int>(ltt.rows.size()))
      << "every candidate accepted: the test exercises nothing";
  const LttRow& chosen = ltt.rows[static_cast<size_t>(ltt.chosen)];
  ASSERT_LT(chosen.threshold, 1.0f) << "only full depth was accepted";
  EXPECT_LT(chosen.mean_exit_layer, 3.0);
  EXPECT_LE(chosen.p_value, kEpsilon);
  EXPECT_LE(chosen.risk, kDelta);
  EXPECT_GT(ltt.rows[static_cast<size_t>(ltt.chosen) + 1].p_value, kEpsilon);
  EXPECT_DOUBLE_EQ(chosen.p_value,
                   HoeffdingBentkusPValue(chosen.risk, static_cast<int64_t>(texts.size()), kDelta));

  // Recompute the chosen threshold's risk independently: whole texts in one call each.
  double risk_sum = 0.0;
  for (const CalibrationText& text : texts) {
    auto full_memory = model->NewMemory();
    auto exit_memory = model->NewMemory();
    auto full = model->Forward(text.tokens, full_memory);
    auto exit = model->ForwardWithExit(text.tokens, exit_memory, chosen.threshold);
    ASSERT_TRUE(full.ok() && exit.ok());
    const torch::Tensor same = full->argmax(-1).eq(exit->logprobs.argmax(-1));  // [n]
    risk_sum += 1.0 - same.to(torch::kFloat64).mean().item<double>();
  }
  EXPECT_NEAR(risk_sum / static_cast<double>(texts.size()), chosen.risk, 1e-12);

  // Fresh texts from the same distribution: the certified bound holds there too.
  const std::vector<CalibrationText> fresh = Texts(150, 32, 5000);
  absl::StatusOr<std::vector<CandidateMeasurement>> check =
      MeasureAgreement(*model, fresh, std::vector<float>{chosen.threshold}, options);
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_LE((*check)[0].MeanRisk(), kDelta);
}

TEST(CalibrationTest, WriteExitThresholdRoundTripsThroughTheModelLoader) {
  const fs::path dir = fs::temp_directory_path() / "mnemo_calm_write_test";
  fs::remove_all(dir);
  auto model = model::Model::Random(Config(), 3);
  ASSERT_TRUE(model->Save(dir.string()).ok());
  // Unknown fields survive the edit.
  {
    std::ifstream in(dir / "config.json");
    std::stringstream text;
    text << in.rdbuf();
    nlohmann::json json = nlohmann::json::parse(text.str());
    json["note"] = "kept";
    std::ofstream(dir / "config.json") << json.dump(2);
  }
  ASSERT_TRUE(WriteExitThreshold(dir.string(), 0.9f).ok());
  auto loaded = model::Model::Load(dir.string(), {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FLOAT_EQ((*loaded)->config().exit_threshold, 0.9f);
  std::ifstream in(dir / "config.json");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("\"exit_threshold\": 0.9,\n"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("\"note\": \"kept\""), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "config.json.calibrate.tmp"));

  EXPECT_FALSE(WriteExitThreshold(dir.string(), -1.0f).ok());  // invalid: not written
  auto again = model::Model::Load(dir.string(), {});
  ASSERT_TRUE(again.ok());
  EXPECT_FLOAT_EQ((*again)->config().exit_threshold, 0.9f);
  EXPECT_FALSE(WriteExitThreshold((dir / "missing").string(), 0.5f).ok());
  fs::remove_all(dir);
}

TEST(CalibrationTest, EachMeasureHasItsOwnThresholdAndTheDefaultMeasureIsWritten) {
  const fs::path dir = fs::temp_directory_path() / "mnemo_calm_write_measures_test";
  fs::remove_all(dir);
  auto model = model::Model::Random(Config(), 3);
  ASSERT_TRUE(model->Save(dir.string()).ok());
  ASSERT_TRUE(WriteExitThreshold(dir.string(), 0.9f).ok());
  ASSERT_TRUE(WriteExitThreshold(dir.string(), 0.97f, model::ExitMeasure::kClassifier).ok());
  ASSERT_TRUE(
      WriteExitThreshold(dir.string(), 0.995f, model::ExitMeasure::kHiddenSaturation).ok());
  ASSERT_TRUE(WriteExitThreshold(dir.string(), 0.96f, model::ExitMeasure::kClassifier).ok());
  ASSERT_TRUE(WriteDefaultExitMeasure(dir.string(), model::ExitMeasure::kHiddenSaturation).ok());
  auto loaded = model::Model::Load(dir.string(), {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const model::ModelConfig& c = (*loaded)->config();
  EXPECT_FLOAT_EQ(c.ExitThreshold(model::ExitMeasure::kSoftmaxResponse), 0.9f);
  EXPECT_FLOAT_EQ(c.ExitThreshold(model::ExitMeasure::kClassifier), 0.96f);
  EXPECT_FLOAT_EQ(c.ExitThreshold(model::ExitMeasure::kHiddenSaturation), 0.995f);
  EXPECT_EQ(c.exit_measure, model::ExitMeasure::kHiddenSaturation);
  // Back to softmax response: the field goes, as in a config that never had it.
  ASSERT_TRUE(WriteDefaultExitMeasure(dir.string(), model::ExitMeasure::kSoftmaxResponse).ok());
  std::ifstream in(dir / "config.json");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str().find("exit_measure"), std::string::npos) << text.str();
  fs::remove_all(dir);
}

TEST(CalibrationTest, AgreementFollowsTheMeasure) {
  // Threshold 0 exits every token after the first layer on any measure; > 1 never. The
  // classifier measure needs a classifier.
  auto model = model::Model::Random(Config(), 11);
  const std::vector<CalibrationText> texts = Texts(3, 24, 7);
  AgreementOptions options;
  options.measure = model::ExitMeasure::kClassifier;
  EXPECT_EQ(MeasureAgreement(*model, texts, std::vector<float>{0.5f}, options).status().code(),
            absl::StatusCode::kFailedPrecondition);
  model->SetExitClassifier(
      model::ExitClassifier(Config().n_layers - 1, Config().d_model, Config().layer_norm_eps));
  for (model::ExitMeasure measure : model::kExitMeasures) {
    options.measure = measure;
    auto measured = MeasureAgreement(*model, texts, std::vector<float>{2.0f, 0.0f}, options);
    ASSERT_TRUE(measured.ok()) << measured.status();
    EXPECT_DOUBLE_EQ((*measured)[0].MeanExitLayer(), 3.0) << model::ExitMeasureName(measure);
    EXPECT_DOUBLE_EQ((*measured)[0].MeanRisk(), 0.0) << model::ExitMeasureName(measure);
    EXPECT_DOUBLE_EQ((*measured)[1].MeanExitLayer(), 1.0) << model::ExitMeasureName(measure);
  }
}

}  // namespace
}  // namespace mnemo::calm
