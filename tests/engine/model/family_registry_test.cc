// The model-family registry (engine/model/family_registry.h): config.json's architecture picks
// the family; the native one is "mnemo-xl"; an unknown one fails in one line naming the file,
// the field and the supported architectures.
#include "engine/model/family_registry.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/model/family.h"
#include "engine/model/mnemo_xl_family.h"
#include "engine/model/model.h"
#include "tests/engine/tiny_model.h"

namespace mnemo::model {
namespace {

namespace fs = std::filesystem;

TEST(FamilyRegistryTest, FindsTheNativeFamilyByItsArchitecture) {
  const ModelFamily* family = FindFamily("mnemo-xl");
  ASSERT_NE(family, nullptr);
  EXPECT_EQ(family->architecture(), "mnemo-xl");
  EXPECT_EQ(family, &MnemoXlFamily::Get());
  ASSERT_FALSE(RegisteredFamilies().empty());
  EXPECT_EQ(RegisteredFamilies().front(), family) << "the native family is listed first";
  EXPECT_NE(SupportedArchitectures().find("mnemo-xl"), std::string::npos);
  for (const char* hf : {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                         "GPT2LMHeadModel"}) {
    ASSERT_NE(FindFamily(hf), nullptr) << hf;
    EXPECT_EQ(FindFamily(hf)->architecture(), hf);
  }
  EXPECT_EQ(FindFamily("FalconForCausalLM"), nullptr);
  EXPECT_EQ(FindFamily(""), nullptr);
}

TEST(FamilyRegistryTest, ReadsTheArchitectureFieldOfEitherLayout) {
  EXPECT_EQ(*ConfigArchitecture(R"({"architecture": "mnemo-xl", "n_layers": 2})"), "mnemo-xl");
  EXPECT_EQ(*ConfigArchitecture(R"({"architectures": ["LlamaForCausalLM"]})"), "LlamaForCausalLM");
  // Native configs from before the field was written.
  EXPECT_EQ(*ConfigArchitecture(R"({"n_layers": 2})"), "mnemo-xl");
  for (const char* bad : {R"({"architecture": 3})", R"({"architectures": []})",
                          R"({"architectures": "LlamaForCausalLM"})", "[1, 2]", "{not json"}) {
    absl::StatusOr<std::string> architecture = ConfigArchitecture(bad);
    EXPECT_EQ(architecture.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(ConfigArchitecture(R"({"architecture": 3})").status().message().find("architecture"),
            std::string::npos);
}

TEST(FamilyRegistryTest, UnknownArchitectureNamesTheFileTheFieldAndTheSupportedOnes) {
  absl::StatusOr<const ModelFamily*> family =
      FamilyForConfig("/models/x/config.json", R"({"architectures": ["Gemma3ForCausalLM"]})");
  ASSERT_EQ(family.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(family.status().message());
  EXPECT_NE(message.find("/models/x/config.json"), std::string::npos) << message;
  EXPECT_NE(message.find("Gemma3ForCausalLM"), std::string::npos) << message;
  EXPECT_NE(message.find("'architecture'"), std::string::npos) << message;
  EXPECT_NE(message.find("mnemo-xl"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << "one line";

  absl::StatusOr<const ModelFamily*> native =
      FamilyForConfig("/models/y/config.json", R"({"architecture": "mnemo-xl"})");
  ASSERT_TRUE(native.ok()) << native.status();
  EXPECT_EQ(*native, &MnemoXlFamily::Get());
}

TEST(FamilyRegistryTest, TheNativeFamilyParsesConfigsAsParseModelConfig) {
  ModelConfig config = ::mnemo::testing::TinyMemoryModelConfig();
  const std::string json = ModelConfigToJson(config);
  absl::StatusOr<ModelConfig> parsed = MnemoXlFamily::Get().ParseConfig(json);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(ModelConfigToJson(*parsed), json);
  EXPECT_EQ(MnemoXlFamily::Get().ParseConfig("{\"n_layers\": 0}").status().code(),
            absl::StatusCode::kInvalidArgument);
}

class FamilyLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mnemo_family_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    model_ = Model::Random(::mnemo::testing::TinyMemoryModelConfig(), 11);
    ASSERT_TRUE(model_->Save(dir_.string()).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Rewrites config.json's architecture field.
  void SetArchitecture(const std::string& architecture) {
    std::string text = ModelConfigToJson(model_->config());
    const std::string native = "\"architecture\": \"mnemo-xl\"";
    const size_t at = text.find(native);
    ASSERT_NE(at, std::string::npos) << text;
    text.replace(at, native.size(), "\"architecture\": \"" + architecture + "\"");
    std::ofstream(dir_ / "config.json", std::ios::trunc) << text;
  }

  fs::path dir_;
  std::unique_ptr<Model> model_;
};

TEST_F(FamilyLoadTest, NativeDirectoryLoadsThroughItsFamilyUnchanged) {
  absl::StatusOr<std::unique_ptr<Model>> loaded = Model::Load(dir_.string(), {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  Model& model = **loaded;
  EXPECT_EQ(model.family().architecture(), "mnemo-xl");
  EXPECT_EQ(model.tokenizer().name(), "byte");
  EXPECT_EQ(model.tokenizer().vocab_size(), model.config().vocab_size);
  EXPECT_EQ(model.ParameterCount(), model_->ParameterCount());
  EXPECT_EQ(model.network().num_layers(), model.config().n_layers);
  // The same weights through the seam: the same log-probs, bit for bit.
  const std::vector<int> tokens = ::mnemo::testing::RandomBytes(40, 3);
  memory::SessionMemory a = model_->NewMemory();
  memory::SessionMemory b = model.NewMemory();
  absl::StatusOr<torch::Tensor> expected = model_->Forward(tokens, a);
  absl::StatusOr<torch::Tensor> actual = model.Forward(tokens, b);
  ASSERT_TRUE(expected.ok() && actual.ok());
  EXPECT_TRUE(torch::equal(*expected, *actual));
}

TEST_F(FamilyLoadTest, UnknownArchitectureFailsToLoadNamingTheSupportedOnes) {
  SetArchitecture("FalconForCausalLM");
  absl::StatusOr<std::unique_ptr<Model>> loaded = Model::Load(dir_.string(), {});
  ASSERT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(loaded.status().message());
  EXPECT_NE(message.find((dir_ / "config.json").string()), std::string::npos) << message;
  EXPECT_NE(message.find("FalconForCausalLM"), std::string::npos) << message;
  EXPECT_NE(message.find("mnemo-xl"), std::string::npos) << message;
  EXPECT_NE(message.find("LlamaForCausalLM"), std::string::npos) << message;
  EXPECT_EQ(LoadModelConfig(dir_.string()).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mnemo::model
