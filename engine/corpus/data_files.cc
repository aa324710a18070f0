#include "engine/corpus/data_files.h"

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "engine/util/files.h"
#include "nlohmann/json.hpp"

namespace mnemo::corpus {
namespace {

namespace fs = std::filesystem;

// A relative entry of a list or split file: as given if it exists, else beside `base`.
std::string Resolve(const std::string& entry, const fs::path& base) {
  fs::path p(entry);
  if (p.is_absolute() || base.empty()) return entry;
  std::error_code error;
  if (fs::exists(p, error)) return entry;
  return (base / p).string();
}

absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& dir) {
  std::vector<std::string> paths;
  std::error_code error;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, error);
  if (error) return absl::NotFoundError(absl::StrCat("cannot list ", dir, ": ", error.message()));
  for (; it != fs::recursive_directory_iterator(); it.increment(error)) {
    if (error) return absl::InternalError(absl::StrCat("listing ", dir, ": ", error.message()));
    if (it->is_regular_file(error)) paths.push_back(it->path().string());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

absl::StatusOr<std::vector<std::string>> ReadListFile(const std::string& path) {
  absl::StatusOr<std::string> text = util::ReadFile(path);
  if (!text.ok()) return text.status();
  const fs::path base = fs::path(path).parent_path();
  std::vector<std::string> paths;
  std::istringstream lines(*text);
  for (std::string line; std::getline(lines, line);) {
    absl::string_view entry = absl::StripAsciiWhitespace(line);
    if (entry.empty() || entry[0] == '#') continue;
    paths.push_back(Resolve(std::string(entry), base));
  }
  return paths;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ReadSplitJson(const std::string& path) {
  absl::StatusOr<std::string> text = util::ReadFile(path);
  if (!text.ok()) return text.status();
  nlohmann::json json = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, " is not JSON"));
  fs::path base = fs::path(path).parent_path();
  const nlohmann::json* list = nullptr;
  if (json.is_array()) {
    list = &json;
  } else if (json.is_object()) {
    for (const char* key : {"validation", "val", "valid", "heldout", "held_out", "eval", "test"}) {
      auto it = json.find(key);
      if (it != json.end() && it->is_array()) {
        list = &*it;
        break;
      }
    }
    for (const char* key : {"root", "data_dir", "data"}) {
      auto it = json.find(key);
      if (it != json.end() && it->is_string()) {
        base = fs::path(it->get<std::string>());
        break;
      }
    }
  }
  if (list == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " has no validation file list (expected an array or a "
                           "\"validation\" member)"));
  }
  std::vector<std::string> paths;
  for (const nlohmann::json& entry : *list) {
    if (entry.is_string()) {
      paths.push_back(Resolve(entry.get<std::string>(), base));
    } else if (entry.is_object() && entry.contains("path") && entry["path"].is_string()) {
      paths.push_back(Resolve(entry["path"].get<std::string>(), base));
    }
  }
  return paths;
}

absl::StatusOr<std::vector<std::string>> ListDataFiles(const std::string& data) {
  std::error_code error;
  if (fs::is_directory(data, error)) return ListDirectory(data);
  if (!fs::is_regular_file(data, error)) {
    return absl::NotFoundError(absl::StrCat(data, " is neither a directory nor a file"));
  }
  if (absl::EndsWith(data, ".json")) return ReadSplitJson(data);
  return ReadListFile(data);
}

}  // namespace mnemo::corpus
