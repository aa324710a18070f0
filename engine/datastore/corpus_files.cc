#include "engine/datastore/corpus_files.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/corpus/corpus.h"
#include "engine/corpus/data_files.h"
#include "engine/util/status_macros.h"

namespace mnemo::datastore {
namespace {

namespace fs = std::filesystem;

std::string Canonical(const std::string& path) {
  std::error_code error;
  fs::path p = fs::weakly_canonical(fs::path(path), error);
  return error ? path : p.string();
}

}  // namespace

absl::StatusOr<std::vector<SourceFile>> SelectCorpusFiles(const std::string& root,
                                                          const CorpusSelection& selection) {
  corpus::CorpusOptions options;
  options.extensions = selection.extensions;
  MNEMO_ASSIGN_OR_RETURN(corpus::Corpus corpus, corpus::Corpus::Scan(root, options));
  std::vector<corpus::CorpusFile> files = corpus.train;
  files.insert(files.end(), corpus.validation.begin(), corpus.validation.end());
  std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) {
    return a.relative_path < b.relative_path;
  });

  std::set<std::string> excluded;
  if (!selection.exclude_split_json.empty()) {
    MNEMO_ASSIGN_OR_RETURN(std::vector<std::string> held_out,
                           corpus::ReadSplitJson(selection.exclude_split_json));
    for (const std::string& path : held_out) excluded.insert(Canonical(path));
  }

  std::vector<SourceFile> out;
  int64_t total = 0;
  for (const corpus::CorpusFile& file : files) {
    if (selection.max_bytes > 0 && total >= selection.max_bytes) break;
    if (excluded.count(Canonical(file.path)) > 0) continue;
    int64_t bytes = file.bytes;
    if (selection.max_bytes > 0) bytes = std::min(bytes, selection.max_bytes - total);
    out.push_back(SourceFile{file.path, bytes});
    total += bytes;
  }
  if (out.empty()) {
    return absl::NotFoundError(absl::StrCat("no corpus files selected under ", root));
  }
  return out;
}

}  // namespace mnemo::datastore
