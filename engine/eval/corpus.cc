#include "engine/eval/corpus.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "engine/util/files.h"

namespace mnemo::eval {
namespace {

namespace fs = std::filesystem;

bool LooksLikeText(const std::string& bytes) {
  const size_t n = std::min<size_t>(bytes.size(), 4096);
  return bytes.find('\0') >= n;
}

}  // namespace

absl::StatusOr<std::vector<Document>> LoadCorpus(const std::vector<std::string>& paths,
                                                 const CorpusOptions& options) {
  std::vector<Document> documents;
  for (const std::string& path : paths) {
    if (options.max_files > 0 && static_cast<int>(documents.size()) >= options.max_files) break;
    std::error_code error;
    const auto size = fs::file_size(path, error);
    if (error) return absl::NotFoundError(absl::StrCat("cannot stat ", path, ": ", error.message()));
    if (static_cast<int64_t>(size) < options.min_bytes) continue;
    absl::StatusOr<std::string> bytes = util::ReadFile(path, options.max_bytes_per_file);
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
