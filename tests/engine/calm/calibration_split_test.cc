#include "engine/calm/calibration_split.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace mnemo::calm {
namespace {

namespace fs = std::filesystem;

TEST(CalibrationSplitTest, KeepsHeldOutFilesThatMnemoEvalDoesNotScore) {
  const std::vector<CorpusEntry> corpus = {
      {"/c/a.py", 8000},     // held out, small: calibration
      {"/c/b.py", 40000},    // held out, >= 32768: mnemo-eval's test file
      {"/c/c.py", 9000},     // trained on
      {"/c/d.txt", 9000},    // wrong extension
      {"/c/e.py", 1000},     // too short
      {"/c/f.py", 32767},    // held out, just below the eval size
  };
  const std::set<std::string> held_out = {"/c/a.py", "/c/b.py", "/c/d.txt", "/c/e.py",
                                          "/c/f.py"};
  SplitRule rule;
  EXPECT_EQ(ChooseCalibrationFiles(corpus, held_out, rule),
            (std::vector<std::string>{"/c/a.py", "/c/f.py"}));
  // Without a split every size-qualifying file of the extension counts.
  EXPECT_EQ(ChooseCalibrationFiles(corpus, std::nullopt, rule),
            (std::vector<std::string>{"/c/a.py", "/c/c.py", "/c/f.py"}));
  rule.extensions.clear();
  rule.eval_min_bytes = 0;  // no size cap
  EXPECT_EQ(ChooseCalibrationFiles(corpus, held_out, rule),
            (std::vector<std::string>{"/c/a.py", "/c/b.py", "/c/d.txt", "/c/f.py"}));
}

TEST(CalibrationSplitTest, ReadsTheModelSplitAndNormalisesPaths) {
  const fs::path dir = fs::temp_directory_path() / "mnemo_calm_split_test";
  fs::remove_all(dir);
  fs::create_directories(dir / "corpus" / "sub");
  std::ofstream(dir / "corpus" / "sub" / "x.py") << std::string(5000, 'x');
  std::ofstream(dir / "corpus" / "y.py") << std::string(5000, 'y');
  std::ofstream(dir / "split.json")
      << R"({"root": ")" << (dir / "corpus").string() << R"(", "validation": ["sub//x.py"]})";
  absl::StatusOr<std::optional<std::set<std::string>>> held_out = ReadHeldOut(dir.string());
  ASSERT_TRUE(held_out.ok()) << held_out.status();
  ASSERT_TRUE(held_out->has_value());
  absl::StatusOr<std::vector<CorpusEntry>> corpus = ScanCorpus((dir / "corpus").string() + "/");
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  ASSERT_EQ(corpus->size(), 2u);
  EXPECT_EQ(ChooseCalibrationFiles(*corpus, *held_out, SplitRule{}),
            (std::vector<std::string>{(dir / "corpus" / "sub" / "x.py").string()}));

  absl::StatusOr<std::optional<std::set<std::string>>> none =
      ReadHeldOut((dir / "corpus").string());
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  EXPECT_FALSE(ScanCorpus((dir / "missing").string()).ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mnemo::calm
