// The held-out corpus: which listed files qualify (size, text) and how much of each is read.
#include "engine/eval/corpus.h"

#include "engine/corpus/data_files.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace mnemo::eval {
namespace {

namespace fs = std::filesystem;

class HeldOutCorpusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mnemo_corpus_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "sub");
    Write("big.py", std::string(5000, 'a'));
    Write("sub/bigger.py", std::string(8000, 'b'));
    Write("small.py", std::string(100, 'c'));
    Write("binary.bin", std::string(6000, '\0'));
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }

  fs::path dir_;
};

TEST_F(HeldOutCorpusTest, DirectoryFiltersSmallAndBinaryFiles) {
  auto paths = corpus::ListDataFiles(dir_.string());
  ASSERT_TRUE(paths.ok()) << paths.status();
  EXPECT_EQ(paths->size(), 4u);
  auto docs = LoadCorpus(*paths, {/*min_bytes=*/1000, 0, 0});
  ASSERT_TRUE(docs.ok()) << docs.status();
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ(TotalBytes(*docs), 13000);

  auto capped = LoadCorpus(*paths, {1000, /*max_files=*/1, /*max_bytes_per_file=*/300});
  ASSERT_TRUE(capped.ok());
  ASSERT_EQ(capped->size(), 1u);
  EXPECT_EQ((*capped)[0].bytes.size(), 300u);
  EXPECT_EQ((*capped)[0].file_bytes, 5000);

  EXPECT_FALSE(LoadCorpus(*paths, {100000, 0, 0}).ok());
}

}  // namespace
}  // namespace mnemo::eval
