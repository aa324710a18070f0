// Which files a tool reads: a directory, a list file or a trainer's split.json, as paths.
// Shared by the evaluator (held-out files), CALM calibration (its held-out split) and the
// datastore builder (files to exclude), none of which owns the format. Plain file I/O;
// thread-compatible.
#ifndef MNEMO_ENGINE_CORPUS_DATA_FILES_H_
#define MNEMO_ENGINE_CORPUS_DATA_FILES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mnemo::corpus {

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

}  // namespace mnemo::corpus

#endif  // MNEMO_ENGINE_CORPUS_DATA_FILES_H_
