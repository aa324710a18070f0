// Whole-file reads shared by every loader (configs, manifests, corpora, split files).
// Plain file I/O; thread-compatible.
#ifndef MNEMO_ENGINE_UTIL_FILES_H_
#define MNEMO_ENGINE_UTIL_FILES_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace mnemo::util {

// The bytes of `path`, or only its first `max_bytes` when max_bytes > 0. NOT_FOUND
// ("PATH: cannot open") when it cannot be opened, DATA_LOSS ("PATH: read failed") when
// reading fails midway.
absl::StatusOr<std::string> ReadFile(const std::string& path, int64_t max_bytes = 0);

}  // namespace mnemo::util

#endif  // MNEMO_ENGINE_UTIL_FILES_H_
