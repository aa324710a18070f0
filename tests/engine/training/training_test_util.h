// A scratch corpus directory for training tests; removed when the object goes.
#ifndef MNEMO_TESTS_ENGINE_TRAINING_TRAINING_TEST_UTIL_H_
#define MNEMO_TESTS_ENGINE_TRAINING_TRAINING_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace mnemo::training {

class ScratchDir {
 public:
  ScratchDir() {
    static int count = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("mnemo_train_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
             std::to_string(count++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }

  std::string Write(const std::string& relative, const std::string& contents) const {
    const std::filesystem::path file = path_ / relative;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file, std::ios::binary) << contents;
    return file.string();
  }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace mnemo::training

#endif  // MNEMO_TESTS_ENGINE_TRAINING_TRAINING_TEST_UTIL_H_
