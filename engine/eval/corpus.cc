#include "engine/eval/corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace mnemo::eval {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::string> ReadFile(const std::string& path, int64_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string bytes;
  if (max_bytes > 0) {
    bytes.resize(static_cast<size_t>(max_bytes));
    in.read(bytes.data(), max_bytes);
    bytes.resize(static_cast<size_t>(in.gcount()));
  } else {
    std::ostringstream buffer;
    buffer << in.rdbuf();
    bytes = std::move(buffer).str();
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read ", path));
  return bytes;
}

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
  absl::StatusOr<std::string> text = ReadFile(path, 0);
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

bool LooksLikeText(const std::string& bytes) {
  const size_t n = std::min<size_t>(bytes.size(), 4096);
  return bytes.find('\0') >= n;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ReadSplitJson(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path, 0);
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

absl::StatusOr<std::vector<Document>> LoadCorpus(const std::vector<std::string>& paths,
                                                 const CorpusOptions& options) {
  std::vector<Document> documents;
  for (const std::string& path : paths) {
    if (options.max_files > 0 && static_cast<int>(documents.size()) >= options.max_files) break;
    std::error_code error;
    const auto size = fs::file_size(path, error);
    if (error) return absl::NotFoundError(absl::StrCat("cannot stat ", path, ": ", error.message()));
    if (static_cast<int64_t>(size) < options.min_bytes) continue;
    absl::StatusOr<std::string> bytes = ReadFile(path, options.max_bytes_per_file);
    if (!bytes.ok()) return bytes.status();
    if (!LooksLikeText(*bytes)) continue;
    documents.push_back(Document{path, std::move(*bytes), static_cast<int64_t>(size)});
  }
  if (documents.empty()) {
    return absl::NotFoundError(absl::StrCat("none of ", paths.size(), " files has at least ",
                                            options.min_bytes, " bytes of text"));
  }
  return documents;
}

int64_t TotalBytes(const std::vector<Document>& documents) {
  int64_t total = 0;
  for (const Document& d : documents) total += static_cast<int64_t>(d.bytes.size());
  return total;
}

}  // namespace mnemo::eval
