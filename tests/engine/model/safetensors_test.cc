#include "engine/model/safetensors.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace mnemo::model {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mnemo_st_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string WriteRaw(const std::string& bytes) {
    const std::string path = (dir_ / "raw.safetensors").string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  static std::string WithHeader(const std::string& header, const std::string& data) {
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    return out + header + data;
  }

  fs::path dir_;
};

TEST_F(SafetensorsTest, WritesAndReadsEveryFloatDtype) {
  torch::Tensor a = torch::arange(12, torch::kFloat32).reshape({3, 4});
  torch::Tensor b = torch::tensor({1.5, -2.0}).to(torch::kBFloat16);
  torch::Tensor c = torch::tensor({0.25, 8.0, -1.0}).to(torch::kFloat16);
  const std::string path = (dir_ / "t.safetensors").string();
  ASSERT_TRUE(WriteSafetensors(path, {{"a", a}, {"b", b}, {"c", c}}, {{"k", "v"}}).ok());

  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->entries().size(), 3u);
  EXPECT_EQ((*file)->metadata().at("k"), "v");
  EXPECT_EQ((*file)->entries().at("b").dtype_name, "BF16");
  EXPECT_TRUE(torch::equal(*(*file)->ReadFloat("a"), a));
  EXPECT_TRUE(torch::equal(*(*file)->ReadFloat("b"), b.to(torch::kFloat32)));
  EXPECT_TRUE(torch::equal(*(*file)->ReadFloat("c"), c.to(torch::kFloat32)));
  EXPECT_EQ((*file)->ReadFloat("zzz").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SafetensorsTest, MissingFileIsNotFound) {
  auto file = SafetensorsFile::Open((dir_ / "absent.safetensors").string());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SafetensorsTest, TruncatedFilesAreDataLossNamingTheTensor) {
  torch::Tensor a = torch::ones({64});
  const std::string path = (dir_ / "t.safetensors").string();
  ASSERT_TRUE(WriteSafetensors(path, {{"weights.a", a}}).ok());
  const auto size = fs::file_size(path);
  // Cut inside the data: the tensor's offsets run past the end.
  fs::resize_file(path, size - 10);
  auto file = SafetensorsFile::Open(path);
  ASSERT_EQ(file.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(file.status().message().find("weights.a"), std::string::npos) << file.status();
  // Cut inside the header, and below the 8-byte length.
  fs::resize_file(path, 20);
  EXPECT_EQ(SafetensorsFile::Open(path).status().code(), absl::StatusCode::kDataLoss);
  fs::resize_file(path, 5);
  EXPECT_EQ(SafetensorsFile::Open(path).status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(SafetensorsTest, CorruptHeadersAreErrorsNotCrashes) {
  const std::string data(16, '\0');
  struct Case {
    std::string bytes;
    const char* expect;
  };
  const Case cases[] = {
      {std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}", "header length"},
      {WithHeader("{not json", data), "JSON"},
      {WithHeader("[1]", data), "object"},
      {WithHeader(R"({"w": {"dtype": "Q7", "shape": [4], "data_offsets": [0, 16]}})", data), "'w'"},
      {WithHeader(R"({"w": {"dtype": "F32", "shape": [5], "data_offsets": [0, 16]}})", data), "'w'"},
      {WithHeader(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [8, 4]}})", data), "'w'"},
      {WithHeader(R"({"w": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}})", data), "'w'"},
      {WithHeader(R"({"w": {"dtype": "F32", "shape": [4]}})", data), "'w'"},
      {WithHeader(R"({"w": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]}})", data), "'w'"},
  };
  for (const Case& c : cases) {
    auto file = SafetensorsFile::Open(WriteRaw(c.bytes));
    ASSERT_FALSE(file.ok()) << c.expect;
    EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(file.status().message().find(c.expect), std::string::npos) << file.status();
  }
}

}  // namespace
}  // namespace mnemo::model
