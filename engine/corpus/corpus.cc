#include "engine/corpus/corpus.h"

#include <algorithm>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/util/files.h"

namespace mnemo::corpus {
namespace {

namespace fs = std::filesystem;

// FNV-1a: stable across platforms and library versions (std::hash is neither).
uint64_t Fnv1a(const std::string& text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

bool LooksLikeUtf8Text(const std::string& bytes) {
  const size_t n = bytes.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = bytes[i];
    if (c == 0) return false;
    if (c < 0x80) {
      ++i;
      continue;
    }
    const int extra = (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xe ? 2 : (c >> 3) == 0x1e ? 3 : -1;
    if (extra < 0 || i + extra >= n) return false;
    for (int k = 1; k <= extra; ++k) {
      if ((static_cast<unsigned char>(bytes[i + k]) >> 6) != 0x2) return false;
    }
    i += extra + 1;
  }
  return true;
}

}  // namespace

bool IsValidationFile(const std::string& relative_path, double validation_fraction) {
  return static_cast<double>(Fnv1a(relative_path) % 100000) < validation_fraction * 100000;
}

int64_t Corpus::train_bytes() const {
  int64_t total = 0;
  for (const CorpusFile& f : train) total += f.bytes;
  return total;
}

int64_t Corpus::validation_bytes() const {
  int64_t total = 0;
  for (const CorpusFile& f : validation) total += f.bytes;
  return total;
}

absl::StatusOr<Corpus> Corpus::Scan(const std::string& root, const CorpusOptions& options) {
  std::error_code error;
  if (!fs::is_directory(root, error)) {
    return absl::NotFoundError(absl::StrCat("corpus directory ", root, " does not exist"));
  }
  Corpus corpus;
  corpus.root = fs::absolute(root).string();
  std::vector<CorpusFile> files;
  for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied, error);
       it != fs::recursive_directory_iterator(); it.increment(error)) {
    if (error) break;
    if (!it->is_regular_file(error)) continue;
    const fs::path& path = it->path();
    if (!options.extensions.empty() &&
        std::find(options.extensions.begin(), options.extensions.end(), path.extension().string()) ==
            options.extensions.end()) {
      continue;
    }
    const int64_t size = static_cast<int64_t>(it->file_size(error));
    if (error || size < options.min_bytes || size > options.max_bytes) continue;
    absl::StatusOr<std::string> text = util::ReadFile(path.string());
    if (!text.ok() || !LooksLikeUtf8Text(*text)) continue;
    files.push_back({fs::absolute(path).string(), fs::relative(path, root).string(), size});
  }
  std::sort(files.begin(), files.end(),
            [](const CorpusFile& a, const CorpusFile& b) { return a.relative_path < b.relative_path; });
  for (CorpusFile& f : files) {
    (IsValidationFile(f.relative_path, options.validation_fraction) ? corpus.validation : corpus.train)
        .push_back(std::move(f));
  }
  if (corpus.train.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("corpus ", root, " has no training files"));
  }
  return corpus;
}

}  // namespace mnemo::corpus
