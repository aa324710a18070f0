// Which corpus files calibrate, chosen so they are neither trained on nor evaluated on.
//
// mnemo-eval's test set is the model's held-out files (MODEL/split.json "validation", written
// by the trainer) of at least its --min_bytes, 32768 by default (eval::CorpusOptions). The
// calibration set is the complement inside the held-out files: held out from training AND
// smaller than that size, so the two never share a file while both stay unseen by training.
// Without a split.json every corpus file qualifies (the caller warns: it may have trained on
// them). Plain file metadata; thread-compatible.
#ifndef MNEMO_ENGINE_CALM_CALIBRATION_SPLIT_H_
#define MNEMO_ENGINE_CALM_CALIBRATION_SPLIT_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mnemo::calm {

// mnemo-eval's default --min_bytes: its test files are the held-out files at least this big.
inline constexpr int64_t kEvalMinBytes = 32768;

struct CorpusEntry {
  std::string path;  // normalised absolute path
  int64_t bytes = 0;
};

struct SplitRule {
  std::vector<std::string> extensions = {".py"};  // empty = every file
  int64_t min_bytes = 4096;                       // shorter files make poor samples
  int64_t eval_min_bytes = kEvalMinBytes;         // files this big belong to mnemo-eval
};

// Files of `corpus` (in its order) that pass `rule` and, when `held_out` is set, appear in it.
std::vector<std::string> ChooseCalibrationFiles(const std::vector<CorpusEntry>& corpus,
                                                const std::optional<std::set<std::string>>& held_out,
                                                const SplitRule& rule);

// Every regular file below `dir`, sorted, with sizes; paths normalised like NormalisePath.
absl::StatusOr<std::vector<CorpusEntry>> ScanCorpus(const std::string& dir);

// The held-out paths of MODEL/split.json (normalised), or nullopt when the file is absent.
absl::StatusOr<std::optional<std::set<std::string>>> ReadHeldOut(const std::string& model_dir);

// Absolute and lexically normal ("/a//b/../c" -> "/a/c"), so split.json and a walk agree.
std::string NormalisePath(const std::string& path);

}  // namespace mnemo::calm

#endif  // MNEMO_ENGINE_CALM_CALIBRATION_SPLIT_H_
