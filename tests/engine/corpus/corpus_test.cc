#include "engine/corpus/corpus.h"

#include <gtest/gtest.h>

#include "tests/engine/training/training_test_util.h"

namespace mnemo::corpus {
namespace {

TEST(CorpusTest, SplitsByPathHashAndSkipsNonText) {
  training::ScratchDir dir;
  for (int i = 0; i < 200; ++i) dir.Write("pkg/m" + std::to_string(i) + ".py", "x = " + std::to_string(i) + "\n");
  dir.Write("binary.py", std::string("ab\0cd", 5));
  dir.Write("latin1.py", "caf\xe9\n");
  dir.Write("notes.txt", "text\n");
  dir.Write("empty.py", "");
  CorpusOptions options;
  options.extensions = {".py"};
  options.validation_fraction = 0.2;
  auto corpus = Corpus::Scan(dir.path(), options);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  EXPECT_EQ(corpus->train.size() + corpus->validation.size(), 200u);
  EXPECT_GT(corpus->validation.size(), 20u);
  EXPECT_LT(corpus->validation.size(), 60u);
  for (const CorpusFile& f : corpus->validation) {
    EXPECT_TRUE(IsValidationFile(f.relative_path, 0.2));
  }
  for (const CorpusFile& f : corpus->train) {
    EXPECT_FALSE(IsValidationFile(f.relative_path, 0.2));
    EXPECT_EQ(f.relative_path.find("binary"), std::string::npos);
    EXPECT_EQ(f.relative_path.find("latin1"), std::string::npos);
  }
  EXPECT_TRUE(std::is_sorted(corpus->train.begin(), corpus->train.end(),
                             [](const CorpusFile& a, const CorpusFile& b) { return a.relative_path < b.relative_path; }));
}

TEST(CorpusTest, SplitOfAFileDoesNotDependOnItsNeighbours) {
  training::ScratchDir a, b;
  for (int i = 0; i < 50; ++i) a.Write("f" + std::to_string(i) + ".py", "pass\n");
  for (int i = 0; i < 50; i += 3) b.Write("f" + std::to_string(i) + ".py", "pass\n");
  auto ca = Corpus::Scan(a.path(), {});
  auto cb = Corpus::Scan(b.path(), {});
  ASSERT_TRUE(ca.ok() && cb.ok());
  for (const CorpusFile& f : cb->validation) {
    EXPECT_TRUE(std::any_of(ca->validation.begin(), ca->validation.end(),
                            [&](const CorpusFile& g) { return g.relative_path == f.relative_path; }));
  }
}

TEST(CorpusTest, MissingOrEmptyDirectoriesAreErrors) {
  EXPECT_EQ(Corpus::Scan("/nonexistent/mnemo", {}).status().code(), absl::StatusCode::kNotFound);
  training::ScratchDir empty;
  EXPECT_EQ(Corpus::Scan(empty.path(), {}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mnemo::corpus
