#include "engine/calm/calibration_split.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/corpus/data_files.h"

namespace mnemo::calm {
namespace {

namespace fs = std::filesystem;

bool HasExtension(const std::string& path, const std::vector<std::string>& extensions) {
  if (extensions.empty()) return true;
  return std::any_of(extensions.begin(), extensions.end(),
                     [&](const std::string& e) { return absl::EndsWith(path, e); });
}

}  // namespace

std::string NormalisePath(const std::string& path) {
  std::error_code error;
  fs::path absolute = fs::absolute(fs::path(path), error);
  if (error) absolute = fs::path(path);
  return absolute.lexically_normal().string();
}

std::vector<std::string> ChooseCalibrationFiles(const std::vector<CorpusEntry>& corpus,
                                                const std::optional<std::set<std::string>>& held_out,
                                                const SplitRule& rule) {
  std::vector<std::string> files;
  for (const CorpusEntry& entry : corpus) {
    if (!HasExtension(entry.path, rule.extensions)) continue;
    if (entry.bytes < rule.min_bytes) continue;
    if (rule.eval_min_bytes > 0 && entry.bytes >= rule.eval_min_bytes) continue;
    if (held_out.has_value() && held_out->count(entry.path) == 0) continue;
    files.push_back(entry.path);
  }
  return files;
}

absl::StatusOr<std::vector<CorpusEntry>> ScanCorpus(const std::string& dir) {
  std::error_code error;
  if (!fs::is_directory(dir, error)) {
    return absl::NotFoundError(absl::StrCat("corpus ", dir, " is not a directory"));
  }
  absl::StatusOr<std::vector<std::string>> paths = corpus::ListDataFiles(dir);
  if (!paths.ok()) return paths.status();
  std::vector<CorpusEntry> entries;
  for (const std::string& path : *paths) {
    const auto size = fs::file_size(path, error);
    if (error) return absl::NotFoundError(absl::StrCat("cannot stat ", path, ": ", error.message()));
    entries.push_back(CorpusEntry{NormalisePath(path), static_cast<int64_t>(size)});
  }
  return entries;
}

absl::StatusOr<std::optional<std::set<std::string>>> ReadHeldOut(const std::string& model_dir) {
  const std::string split = (fs::path(model_dir) / "split.json").string();
  std::error_code error;
  if (!fs::exists(split, error)) return std::optional<std::set<std::string>>();
  absl::StatusOr<std::vector<std::string>> paths = corpus::ReadSplitJson(split);
  if (!paths.ok()) return paths.status();
  std::set<std::string> held_out;
  for (const std::string& p : *paths) held_out.insert(NormalisePath(p));
  return std::optional<std::set<std::string>>(std::move(held_out));
}

}  // namespace mnemo::calm
