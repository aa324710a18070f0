// Which corpus files go into a datastore: the text files below a directory, optionally only the
// model's training files (so its held-out files are never retrievable), up to a byte budget.
// Plain file I/O; thread-compatible.
#ifndef MNEMO_ENGINE_DATASTORE_CORPUS_FILES_H_
#define MNEMO_ENGINE_DATASTORE_CORPUS_FILES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mnemo::datastore {

struct SourceFile {
  std::string path;   // absolute
  int64_t bytes = 0;  // bytes to index from the start of the file (<= its size)
};

struct CorpusSelection {
  std::vector<std::string> extensions;  // e.g. {".py"}; empty = every text file
  // Non-empty: a trainer split.json whose validation files are excluded (--split train).
  std::string exclude_split_json;
  int64_t max_bytes = 0;  // total budget; the last file is truncated to fit; 0 = everything
};

// Files in relative-path order (corpus::Corpus::Scan's walk: UTF-8 text files up to 4 MiB).
// NOT_FOUND if nothing qualifies; errors from reading the split file are passed on.
absl::StatusOr<std::vector<SourceFile>> SelectCorpusFiles(const std::string& root,
                                                          const CorpusSelection& selection);

}  // namespace mnemo::datastore

#endif  // MNEMO_ENGINE_DATASTORE_CORPUS_FILES_H_
