// ModelId: the fingerprint follows the weights and architecture, not the calibrated exit
// thresholds, the default exit measure or the exit classifier.
#include "engine/datastore/model_id.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "engine/model/exit_classifier.h"
#include "engine/model/model.h"
#include "gtest/gtest.h"
#include "tests/engine/tiny_model.h"

namespace mnemo::datastore {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void Replace(const fs::path& path, const std::string& from, const std::string& to) {
  std::string text = ReadFile(path);
  const size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
  std::ofstream(path) << text;
}

TEST(ModelIdTest, ExitThresholdDoesNotChangeTheFingerprintButWeightsAndConfigDo) {
  const fs::path dir = fs::temp_directory_path() / ("mnemo_model_id_" + std::to_string(getpid()));
  model::ModelConfig config = testing::TinyModelConfig();
  config.name = "id-test";
  ASSERT_TRUE(model::Model::Random(config, 5)->Save(dir.string()).ok());
  absl::StatusOr<ModelId> original = ComputeModelId(dir.string());
  ASSERT_TRUE(original.ok()) << original.status();
  EXPECT_EQ(original->name, "id-test");
  EXPECT_EQ(original->fingerprint.size(), 16u);

  const fs::path config_path = dir / "config.json";
  const std::string text = ReadFile(config_path);
  // A calibrated threshold, written or changed: same model.
  if (text.find("\"exit_threshold\"") == std::string::npos) {
    Replace(config_path, "\"d_model\"", "\"exit_threshold\": 0.75,\n  \"d_model\"");
  } else {
    const size_t at = text.find("\"exit_threshold\": ");
    const size_t end = text.find_first_of(",\n", at);
    std::string updated = text;
    updated.replace(at, end - at, "\"exit_threshold\": 0.75");
    std::ofstream(config_path) << updated;
  }
  absl::StatusOr<ModelId> calibrated = ComputeModelId(dir.string());
  ASSERT_TRUE(calibrated.ok()) << calibrated.status();
  EXPECT_EQ(calibrated->fingerprint, original->fingerprint);

  // Another architecture field is another model.
  std::ofstream(config_path) << text;
  Replace(config_path, "\"mem_len\": ", "\"mem_len\": 1");
  absl::StatusOr<ModelId> other = ComputeModelId(dir.string());
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(other->fingerprint, original->fingerprint);

  // Other weights are another model.
  std::ofstream(config_path) << text;
  ASSERT_TRUE(model::Model::Random(config, 6)->Save(dir.string()).ok());
  absl::StatusOr<ModelId> retrained = ComputeModelId(dir.string());
  ASSERT_TRUE(retrained.ok());
  EXPECT_NE(retrained->fingerprint, original->fingerprint);
  fs::remove_all(dir);
}

TEST(ModelIdTest, PerMeasureCalibrationAndTheExitClassifierKeepTheFingerprint) {
  const fs::path dir =
      fs::temp_directory_path() / ("mnemo_model_id_measures_" + std::to_string(getpid()));
  model::ModelConfig config = testing::TinyModelConfig();
  config.name = "id-test";
  std::unique_ptr<model::Model> model = model::Model::Random(config, 5);
  ASSERT_TRUE(model->Save(dir.string()).ok());
  absl::StatusOr<ModelId> original = ComputeModelId(dir.string());
  ASSERT_TRUE(original.ok()) << original.status();

  // mnemo-calibrate --measure classifier --write --make_default, and mnemo-train
  // --exit_classifier: neither changes a weight or a hidden state.
  config.SetExitThreshold(model::ExitMeasure::kClassifier, 0.95f);
  config.SetExitThreshold(model::ExitMeasure::kHiddenSaturation, 0.99f);
  config.exit_measure = model::ExitMeasure::kClassifier;
  std::ofstream(dir / "config.json", std::ios::trunc) << model::ModelConfigToJson(config);
  model::ExitClassifier classifier(config.n_layers - 1, config.d_model, config.layer_norm_eps);
  ASSERT_TRUE(model::SaveExitClassifier((dir / model::kExitClassifierFile).string(), *classifier,
                                        model::WeightsChecksum(*model->transformer()))
                  .ok());
  absl::StatusOr<ModelId> calibrated = ComputeModelId(dir.string());
  ASSERT_TRUE(calibrated.ok()) << calibrated.status();
  EXPECT_EQ(calibrated->fingerprint, original->fingerprint);
  fs::remove_all(dir);
}

TEST(ModelIdTest, TheBundledModelKeepsTheFingerprintItsDatastoresRecord) {
  // docs/results/knn_lm*.json were built against this id; recalibration (any measure) and the
  // exit classifier must never change it, or those datastores stop loading.
  const char* source = std::getenv("MNEMO_SOURCE_DIR");
  ASSERT_NE(source, nullptr) << "MNEMO_SOURCE_DIR is set by the test registration";
  absl::StatusOr<ModelId> id = ComputeModelId((fs::path(source) / "models/mnemo-stdlib").string());
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->ToString(), "mnemo-stdlib@f5f07f83b420aeae");
}

}  // namespace
}  // namespace mnemo::datastore
