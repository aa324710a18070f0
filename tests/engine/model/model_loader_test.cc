// Loading model directories: good ones reproduce the saved model exactly; bad ones are clear
// errors that name the file and tensor at fault.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "engine/model/model.h"
#include "engine/model/safetensors.h"
#include "tests/engine/tiny_model.h"

namespace mnemo::model {
namespace {

namespace fs = std::filesystem;

ModelConfig TinyConfig() {
  ModelConfig c = ::mnemo::testing::TinyModelConfig();
  c.seg_len = 8;
  c.mem_len = 8;
  c.cmem_len = 4;
  c.cmem_rate = 2;
  c.compression = Compression::kConv;
  return c;
}

class ModelLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mnemo_loader_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    model_ = Model::Random(TinyConfig(), 7);
    ASSERT_TRUE(model_->Save(dir_.string()).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string weights() const { return (dir_ / "model.safetensors").string(); }

  // Rewrites model.safetensors with `edit` applied to the saved tensors.
  void RewriteTensors(
      const std::function<void(std::vector<std::pair<std::string, torch::Tensor>>&)>& edit) {
    auto file = SafetensorsFile::Open(weights());
    ASSERT_TRUE(file.ok());
    std::vector<std::pair<std::string, torch::Tensor>> tensors;
    for (const auto& [name, entry] : (*file)->entries()) {
      tensors.emplace_back(name, *(*file)->ReadFloat(name));
    }
    file->reset();
    edit(tensors);
    ASSERT_TRUE(WriteSafetensors(weights(), tensors).ok());
  }

  absl::Status LoadStatus() { return Model::Load(dir_.string(), {}).status(); }

  fs::path dir_;
  std::unique_ptr<Model> model_;
};

TEST_F(ModelLoaderTest, LoadedModelComputesTheSameFunction) {
  auto loaded = Model::Load(dir_.string(), {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->ParameterCount(), model_->ParameterCount());
  EXPECT_EQ((*loaded)->ParameterCount(), TinyConfig().ParameterCount());
  std::vector<int> tokens = {kBosId, 'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'};
  auto m1 = model_->NewMemory();
  auto m2 = (*loaded)->NewMemory();
  auto a = model_->Forward(tokens, m1);
  auto b = (*loaded)->Forward(tokens, m2);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(torch::equal(*a, *b));
}

TEST_F(ModelLoaderTest, MissingDirectoryAndFiles) {
  EXPECT_EQ(Model::Load((dir_ / "nope").string(), {}).status().code(),
            absl::StatusCode::kNotFound);
  fs::remove(dir_ / "model.safetensors");
  absl::Status s = LoadStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("model.safetensors"), std::string::npos) << s;
  fs::remove(dir_ / "config.json");
  s = LoadStatus();
  EXPECT_NE(s.message().find("config.json"), std::string::npos) << s;
}

TEST_F(ModelLoaderTest, TruncatedWeightsNameTheTensor) {
  fs::resize_file(weights(), fs::file_size(weights()) - 100);
  absl::Status s = LoadStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("tensor '"), std::string::npos) << s;
}

TEST_F(ModelLoaderTest, MismatchedConfigNamesTensorAndShapes) {
  ModelConfig wider = TinyConfig();
  wider.d_ff = 96;
  std::ofstream(dir_ / "config.json", std::ios::trunc) << ModelConfigToJson(wider);
  absl::Status s = LoadStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("blocks.0.ff1.weight"), std::string::npos) << s;
  EXPECT_NE(s.message().find("[96, 32]"), std::string::npos) << s;
}

TEST_F(ModelLoaderTest, MissingAndUnexpectedTensors) {
  RewriteTensors([](auto& tensors) { tensors.erase(tensors.begin()); });
  absl::Status s = LoadStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("is missing"), std::string::npos) << s;

  SetUp();
  RewriteTensors([](auto& tensors) { tensors.emplace_back("extra.weight", torch::ones({2})); });
  s = LoadStatus();
  EXPECT_NE(s.message().find("unexpected tensor 'extra.weight'"), std::string::npos) << s;
}

TEST_F(ModelLoaderTest, NonFiniteAndNonFloatWeightsAreRejected) {
  RewriteTensors([](auto& tensors) {
    for (auto& [name, t] : tensors) {
      if (name == "final_norm.weight") t[0] = std::numeric_limits<float>::quiet_NaN();
    }
  });
  absl::Status s = LoadStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("final_norm.weight"), std::string::npos) << s;

  SetUp();
  RewriteTensors([](auto& tensors) {
    for (auto& [name, t] : tensors) {
      if (name == "final_norm.bias") t = t.to(torch::kInt32);
    }
  });
  s = LoadStatus();
  EXPECT_NE(s.message().find("final_norm.bias"), std::string::npos) << s;
}

TEST_F(ModelLoaderTest, HalfPrecisionWeightsLoad) {
  RewriteTensors([](auto& tensors) {
    for (auto& [name, t] : tensors) t = t.to(torch::kBFloat16);
  });
  auto loaded = Model::Load(dir_.string(), {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
}

TEST_F(ModelLoaderTest, HalfWeightsAreRoundedOnceAndComputeConsistently) {
  // float16 and bfloat16: every parameter is the saved one rounded, still a float32 tensor; the
  // same text all at once and token by token (prompt products vs decode-sized ones, both on the
  // packed copies) agrees; against the float32 model it moves a little, not a lot (here: 1.7e-4
  // with float16, 1.6e-3 with bfloat16, whose products round their inputs too).
  std::vector<int> tokens = {kBosId, 'h', 'e', 'l', 'l', 'o', ',', ' ', 'w', 'o', 'r', 'l',
                             'd', '!', ' ', 'a', 'g', 'a', 'i', 'n', '.'};
  auto full_memory = model_->NewMemory();
  auto full = model_->Forward(tokens, full_memory);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(model_->weight_dtype(), torch::kFloat32);
  for (torch::ScalarType type : {torch::kFloat16, torch::kBFloat16}) {
    SCOPED_TRACE(WeightDtypeName(type));
    LoadOptions options;
    options.weight_dtype = type;
    auto loaded = Model::Load(dir_.string(), options);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ((*loaded)->weight_dtype(), type);
    auto original = model_->transformer()->named_parameters();
    for (const auto& item : (*loaded)->transformer()->named_parameters()) {
      const torch::Tensor& p = item.value();
      ASSERT_EQ(p.scalar_type(), torch::kFloat32) << item.key();
      EXPECT_TRUE(torch::equal(p, original[item.key()].to(type).to(torch::kFloat32)))
          << item.key();
    }
    auto whole_memory = (*loaded)->NewMemory();
    auto whole = (*loaded)->Forward(tokens, whole_memory);
    ASSERT_TRUE(whole.ok()) << whole.status();
    auto step_memory = (*loaded)->NewMemory();
    float incremental = 0.0f;
    for (size_t i = 0; i < tokens.size(); ++i) {
      auto one = (*loaded)->Forward({tokens[i]}, step_memory, Outputs::kLast);
      ASSERT_TRUE(one.ok()) << one.status();
      incremental = std::max(incremental, ((*one)[0] - (*whole)[i]).abs().max().item<float>());
    }
    EXPECT_LT(incremental, 1e-4);
    const float moved = (*full - *whole).abs().max().item<float>();
    EXPECT_GT(moved, 0.0f);
    EXPECT_LT(moved, 2e-2);
  }
}

TEST_F(ModelLoaderTest, Float16WeightsRefuseValuesBeyondItsRange) {
  RewriteTensors([](auto& tensors) {
    for (auto& [name, t] : tensors) {
      if (name == "final_norm.weight") t[0] = 1e5;
    }
  });
  LoadOptions half;
  half.weight_dtype = torch::kFloat16;
  const absl::Status s = Model::Load(dir_.string(), half).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("float16"), std::string::npos) << s;
  EXPECT_TRUE(LoadStatus().ok());  // float32 holds them
  LoadOptions bfloat16;           // and so does bfloat16 (float32's range)
  bfloat16.weight_dtype = torch::kBFloat16;
  EXPECT_TRUE(Model::Load(dir_.string(), bfloat16).ok());
}

TEST_F(ModelLoaderTest, WeightDtypeParsesItsThreeNamesOnly) {
  EXPECT_EQ(*ParseWeightDtype("float32"), torch::kFloat32);
  EXPECT_EQ(*ParseWeightDtype("float16"), torch::kFloat16);
  EXPECT_EQ(*ParseWeightDtype("bfloat16"), torch::kBFloat16);
  for (const char* bad : {"", "fp16", "bf16", "Float16", "int8", "float64"}) {
    const absl::Status s = ParseWeightDtype(bad).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("bfloat16"), std::string::npos) << s;  // says what is allowed
  }
  for (torch::ScalarType type : {torch::kFloat32, torch::kFloat16, torch::kBFloat16}) {
    EXPECT_EQ(*ParseWeightDtype(WeightDtypeName(type)), type);
  }
  LoadOptions doubles;
  doubles.weight_dtype = torch::kFloat64;
  EXPECT_EQ(Model::Load(dir_.string(), doubles).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ModelLoaderTest, ForwardRejectsOutOfVocabularyIds) {
  auto memory = model_->NewMemory();
  std::vector<int> bad = {1, 5000};
  EXPECT_EQ(model_->Forward(bad, memory).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(memory.next_position(), 0);
}

}  // namespace
}  // namespace mnemo::model
