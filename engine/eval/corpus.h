// Held-out evaluation corpus: which files mnemo-eval scores and their bytes.
//
// Sources, in the order mnemo-eval tries them: a directory of text files (walked recursively),
// a list file (one path per line), or the trainer's split.json in the model directory.
// Everything here is plain file I/O; no model is involved. Thread-compatible.
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

// Paths named by `data`: a directory (every regular file below it, sorted), a split.json
// (see ReadSplitJson) or a list file (one path per line; '#' comments and blanks skipped;
// relative paths are taken relative to the list's folder when they do not exist as given).
absl::StatusOr<std::vector<std::string>> ListDataFiles(const std::string& data);

// The validation files of a trainer split.json. Accepts a top-level array of paths, or an
// object whose "validation" / "val" / "valid" / "heldout" / "held_out" / "eval" / "test"
// member is such an array (entries may be strings or objects with a "path"). Relative
// paths are resolved against the object's "root" / "data_dir" / "data" member when present,
// else against the split file's folder.
absl::StatusOr<std::vector<std::string>> ReadSplitJson(const std::string& path);

// Reads `paths` in order, keeping files of at least min_bytes that look like text (no NUL
// byte in their first 4 KB), up to max_files. NOT_FOUND if none qualifies.
absl::StatusOr<std::vector<Document>> LoadCorpus(const std::vector<std::string>& paths,
                                                 const CorpusOptions& options);

// Sum of Document::bytes sizes.
int64_t TotalBytes(const std::vector<Document>& documents);

}  // namespace mnemo::eval

#endif  // MNEMO_ENGINE_EVAL_CORPUS_H_
