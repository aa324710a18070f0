// Held-out evaluation corpus: which files mnemo-eval scores and their bytes.
//
// The paths come from corpus::ListDataFiles (engine/corpus/data_files.h): a directory, a list
// file or the trainer's split.json. Plain file I/O; no model is involved. Thread-compatible.
#ifndef MNEMO_ENGINE_EVAL_CORPUS_H_
#define MNEMO_ENGINE_EVAL_CORPUS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mnemo::eval {

// One held-out file, read as raw bytes (the model's vocabulary is bytes).
struct Document {
  std::string path;
  std::string bytes;      // possibly truncated to CorpusOptions::max_bytes_per_file
  int64_t file_bytes = 0; // size on disk
};

struct CorpusOptions {
  int64_t min_bytes = 32768;       // files smaller than this are skipped (long-context eval)
  int max_files = 0;               // 0 = every qualifying file
  int64_t max_bytes_per_file = 0;  // 0 = whole files
};

// Reads `paths` in order, keeping files of at least min_bytes that look like text (no NUL
// byte in their first 4 KB), up to max_files. NOT_FOUND if none qualifies.
absl::StatusOr<std::vector<Document>> LoadCorpus(const std::vector<std::string>& paths,
                                                 const CorpusOptions& options);

// Sum of Document::bytes sizes.
int64_t TotalBytes(const std::vector<Document>& documents);

}  // namespace mnemo::eval

#endif  // MNEMO_ENGINE_EVAL_CORPUS_H_
