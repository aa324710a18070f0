// Corpus: the text files of a directory, split deterministically into training and
// validation files by a hash of each file's relative path (so a file's split never depends on
// what else is in the directory, and held-out files are never trained on). The trainer writes
// the validation half to the model's split.json (data_files.h reads it back); the datastore
// builder indexes the training half. Plain file I/O; thread-compatible.
#ifndef MNEMO_ENGINE_CORPUS_CORPUS_H_
#define MNEMO_ENGINE_CORPUS_CORPUS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mnemo::corpus {

struct CorpusFile {
  std::string path;           // absolute
  std::string relative_path;  // to the corpus root; the split is decided on this
  int64_t bytes = 0;
};

struct CorpusOptions {
  std::vector<std::string> extensions;  // e.g. {".py"}; empty = every text file
  int64_t min_bytes = 1;
  int64_t max_bytes = int64_t{4} << 20;  // larger files are skipped (generated data, not code)
  double validation_fraction = 0.08;
};

struct Corpus {
  std::string root;
  std::vector<CorpusFile> train;       // sorted by relative path
  std::vector<CorpusFile> validation;  // sorted by relative path

  int64_t train_bytes() const;
  int64_t validation_bytes() const;

  // Walks `root` recursively. Files that are not UTF-8 text are skipped.
  static absl::StatusOr<Corpus> Scan(const std::string& root, const CorpusOptions& options);
};

// True if `relative_path` belongs to the validation split.
bool IsValidationFile(const std::string& relative_path, double validation_fraction);

}  // namespace mnemo::corpus

#endif  // MNEMO_ENGINE_CORPUS_CORPUS_H_
