#include "tools/decode_bench/text_source.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/util/files.h"

namespace mnemo::tools {

absl::StatusOr<std::unique_ptr<TextSource>> TextSource::Create(
    const std::string& dir, const std::string& suffix, int64_t max_bytes,
    const tokenizer::Tokenizer& tokenizer) {
  namespace fs = std::filesystem;
  std::vector<std::string> paths;
  std::error_code error;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied,
                                           error), end;
       !error && it != end; it.increment(error)) {
    if (it->is_regular_file(error) && absl::EndsWith(it->path().native(), suffix)) {
      paths.push_back(it->path().string());
    }
  }
  std::sort(paths.begin(), paths.end());  // the same text on every machine with the same files
  std::unique_ptr<TextSource> source(new TextSource());
  for (const std::string& path : paths) {
    if (source->bytes() >= max_bytes) break;
    absl::StatusOr<std::string> bytes = util::ReadFile(path);
    if (!bytes.ok()) return bytes.status();
    if (bytes->empty()) continue;
    source->text_ += *bytes;
    ++source->files_;
  }
  if (source->text_.empty()) {
    return absl::NotFoundError(absl::StrCat("no non-empty *", suffix, " files below ", dir));
  }
  if (source->bytes() > max_bytes) source->text_.resize(max_bytes);
  source->tokens_ = tokenizer.Encode(source->text_);
  if (source->tokens_.empty()) {
    return absl::NotFoundError(absl::StrCat("the *", suffix, " files below ", dir,
                                            " encode to no tokens"));
  }
  return source;
}

std::vector<int> TextSource::Next(int64_t n) {
  std::vector<int> out;
  out.reserve(n);
  while (static_cast<int64_t>(out.size()) < n) {
    out.push_back(tokens_[cursor_]);
    if (++cursor_ == static_cast<int64_t>(tokens_.size())) cursor_ = 0, ++cycles_;
  }
  return out;
}

}  // namespace mnemo::tools
