#include "engine/model/model_config.h"

#include <gtest/gtest.h>

namespace mnemo::model {
namespace {

TEST(ModelConfigTest, RoundTripsThroughJson) {
  ModelConfig c;
  c.n_layers = 3;
  c.d_model = 48;
  c.n_heads = 3;
  c.d_head = 16;
  c.d_ff = 100;
  c.cmem_len = 7;
  c.cmem_rate = 3;
  c.compression = Compression::kConv;
  absl::StatusOr<ModelConfig> parsed = ParseModelConfig(ModelConfigToJson(c));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->n_layers, 3);
  EXPECT_EQ(parsed->d_head, 16);
  EXPECT_EQ(parsed->d_ff, 100);
  EXPECT_EQ(parsed->cmem_len, 7);
  EXPECT_EQ(parsed->compression, Compression::kConv);
  EXPECT_EQ(parsed->ParameterCount(), c.ParameterCount());
}

TEST(ModelConfigTest, ExitThresholdRoundTripsAndDefaultsToNeverExit) {
  ModelConfig c;
  EXPECT_FLOAT_EQ(c.exit_threshold, 1.0f);
  c.exit_threshold = 0.85f;
  const std::string json = ModelConfigToJson(c);
  EXPECT_NE(json.find("\"exit_threshold\": 0.85,\n"), std::string::npos) << json;
  absl::StatusOr<ModelConfig> parsed = ParseModelConfig(json);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FLOAT_EQ(parsed->exit_threshold, 0.85f);
  // A config written before the field existed loads as uncalibrated.
  absl::StatusOr<ModelConfig> old = ParseModelConfig(R"({"d_model": 64, "n_heads": 4})");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_FLOAT_EQ(old->exit_threshold, 1.0f);
  for (const char* bad : {R"({"exit_threshold": -0.1})", R"({"exit_threshold": "high"})"}) {
    absl::StatusOr<ModelConfig> rejected = ParseModelConfig(bad);
    ASSERT_FALSE(rejected.ok()) << bad;
    EXPECT_NE(rejected.status().message().find("exit_threshold"), std::string::npos);
  }
}

TEST(ModelConfigTest, PerMeasureThresholdsAndDefaultMeasureRoundTrip) {
  ModelConfig c;
  for (ExitMeasure m : kExitMeasures) EXPECT_FLOAT_EQ(c.ExitThreshold(m), 1.0f);
  EXPECT_EQ(c.exit_measure, ExitMeasure::kSoftmaxResponse);
  // Uncalibrated measures and the default measure leave no trace: old configs keep their text.
  const std::string plain = ModelConfigToJson(c);
  EXPECT_EQ(plain.find("exit_thresholds"), std::string::npos) << plain;
  EXPECT_EQ(plain.find("exit_measure"), std::string::npos) << plain;

  c.SetExitThreshold(ExitMeasure::kSoftmaxResponse, 0.9f);
  c.SetExitThreshold(ExitMeasure::kClassifier, 0.95f);
  c.exit_measure = ExitMeasure::kClassifier;
  EXPECT_FLOAT_EQ(c.exit_threshold, 0.9f);
  const std::string json = ModelConfigToJson(c);
  EXPECT_NE(json.find("\"exit_thresholds\": {\n    \"classifier\": 0.95\n  }"), std::string::npos)
      << json;
  EXPECT_NE(json.find("\"exit_measure\": \"classifier\""), std::string::npos) << json;
  absl::StatusOr<ModelConfig> parsed = ParseModelConfig(json);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FLOAT_EQ(parsed->ExitThreshold(ExitMeasure::kSoftmaxResponse), 0.9f);
  EXPECT_FLOAT_EQ(parsed->ExitThreshold(ExitMeasure::kClassifier), 0.95f);
  EXPECT_FLOAT_EQ(parsed->ExitThreshold(ExitMeasure::kHiddenSaturation), 1.0f);
  EXPECT_EQ(parsed->exit_measure, ExitMeasure::kClassifier);

  // The bundled model's shape of config (exit_threshold only) reads as before.
  absl::StatusOr<ModelConfig> old = ParseModelConfig(R"({"exit_threshold": 0.9})");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_FLOAT_EQ(old->ExitThreshold(ExitMeasure::kSoftmaxResponse), 0.9f);
  EXPECT_FLOAT_EQ(old->ExitThreshold(ExitMeasure::kClassifier), 1.0f);
  EXPECT_EQ(old->exit_measure, ExitMeasure::kSoftmaxResponse);
}

TEST(ModelConfigTest, RejectsBadExitCalibrationByName) {
  struct Case {
    const char* json;
    const char* says;
  };
  for (const Case& c : {Case{R"({"exit_thresholds": 0.5})", "exit_thresholds"},
                        Case{R"({"exit_thresholds": {"entropy": 0.5}})", "entropy"},
                        Case{R"({"exit_thresholds": {"softmax": 0.5}})", "exit_threshold"},
                        Case{R"({"exit_thresholds": {"classifier": "high"}})", "classifier"},
                        Case{R"({"exit_thresholds": {"saturation": -1}})", "saturation"},
                        Case{R"({"exit_measure": "entropy"})", "exit_measure"},
                        Case{R"({"exit_measure": 2})", "exit_measure"}}) {
    absl::StatusOr<ModelConfig> rejected = ParseModelConfig(c.json);
    ASSERT_FALSE(rejected.ok()) << c.json;
    EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument) << c.json;
    EXPECT_NE(rejected.status().message().find(c.says), std::string::npos)
        << c.json << ": " << rejected.status();
  }
}

TEST(ModelConfigTest, DerivesHeadAndFeedForwardWidths) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(R"({"d_model": 64, "n_heads": 4})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->d_head, 16);
  EXPECT_EQ(c->d_ff, 256);
}

TEST(ModelConfigTest, RejectsBadFieldsByName) {
  struct Case {
    const char* json;
    const char* field;
  };
  for (const Case& c : {Case{R"({"n_layers": 0})", "n_layers"},
                        Case{R"({"mem_len": -3})", "mem_len"},
                        Case{R"({"compression": "zip"})", "compression"},
                        Case{R"({"n_heads": "four"})", "n_heads"},
                        Case{R"({"vocab_size": 100})", "vocab_size"},
                        Case{R"({"cmem_len": 4, "cmem_rate": 8, "mem_len": 4})", "cmem_rate"},
                        Case{R"([1, 2])", "object"},
                        Case{R"({"n_layers": )", "JSON"}}) {
    absl::StatusOr<ModelConfig> parsed = ParseModelConfig(c.json);
    ASSERT_FALSE(parsed.ok()) << c.json;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(c.field), std::string::npos)
        << parsed.status().message();
  }
}

TEST(ModelConfigTest, MaxDistanceCoversCompressedSlotsUpToClampLen) {
  ModelConfig c;
  c.mem_len = 16;
  c.cmem_len = 0;
  EXPECT_EQ(c.MaxDistance(), 16);
  c.cmem_len = 8;
  c.cmem_rate = 2;
  EXPECT_EQ(c.MaxDistance(), 16 + 2 * 9);
  c.clamp_len = 20;
  EXPECT_EQ(c.MaxDistance(), 20);
}

}  // namespace
}  // namespace mnemo::model
