// File lists: list files (comments, relative entries) and split.json (its accepted layouts).
#include "engine/corpus/data_files.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace mnemo::corpus {
namespace {

namespace fs = std::filesystem;

class DataFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mnemo_data_files_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
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

TEST_F(DataFilesTest, ListFileAndSplitJson) {
  Write("list.txt", "# held out\nbig.py\n\nsub/bigger.py\n");
  auto listed = ListDataFiles((dir_ / "list.txt").string());
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[1], (dir_ / "sub/bigger.py").string());

  Write("split.json", "{\"train\": [\"small.py\"], \"validation\": [\"big.py\", "
                      "{\"path\": \"sub/bigger.py\"}]}");
  auto split = ListDataFiles((dir_ / "split.json").string());
  ASSERT_TRUE(split.ok()) << split.status();
  ASSERT_EQ(split->size(), 2u);
  EXPECT_EQ((*split)[0], (dir_ / "big.py").string());

  Write("rooted.json", "{\"root\": \"" + dir_.string() + "/sub\", \"val\": [\"bigger.py\"]}");
  auto rooted = ReadSplitJson((dir_ / "rooted.json").string());
  ASSERT_TRUE(rooted.ok()) << rooted.status();
  EXPECT_EQ((*rooted)[0], (dir_ / "sub/bigger.py").string());

  Write("bad.json", "{\"train\": []}");
  EXPECT_FALSE(ReadSplitJson((dir_ / "bad.json").string()).ok());
}

}  // namespace
}  // namespace mnemo::corpus
