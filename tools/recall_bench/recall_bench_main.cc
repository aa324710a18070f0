// mnemo-recall-bench: what a session's recall index costs per token as it grows
// (docs/results/recall.md). Fills a HistoryIndex with N tokens of real text (the bytes of the
// given files, repeated in a seeded order until N), then times `--probe` further tokens, each
// one Query (what a generated token costs) and one Append; prints one row per N with the time
// per token, the bytes held, and how often the query found a match.
//
//   mnemo-recall-bench --sizes 1024,16384,131072,1048576,8388608 /usr/lib/python3.11/*.py
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "engine/datastore/history_index.h"
#include "engine/util/files.h"

ABSL_FLAG(std::string, sizes, "1024,16384,131072,1048576,8388608", "tokens remembered before timing");
ABSL_FLAG(int, probe, 20000, "tokens timed at each size");
ABSL_FLAG(uint64_t, seed, 1, "file order");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("mnemo-recall-bench [--sizes N,...] [--probe N] FILE...");
  std::vector<char*> files = absl::ParseCommandLine(argc, argv);
  files.erase(files.begin());
  if (files.empty()) {
    std::fprintf(stderr, "mnemo-recall-bench: give at least one text file\n");
    return 2;
  }
  std::vector<std::string> texts;
  for (const char* path : files) {
    absl::StatusOr<std::string> text = mnemo::util::ReadFile(path);
    if (text.ok() && !text->empty()) texts.push_back(*std::move(text));
  }
  std::vector<int64_t> sizes;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_sizes), ',', absl::SkipEmpty())) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(s, &n) || n <= 0) {
      std::fprintf(stderr, "mnemo-recall-bench: bad --sizes entry '%s'\n", std::string(s).c_str());
      return 2;
    }
    sizes.push_back(n);
  }
  const int probe = absl::GetFlag(FLAGS_probe);
  // The byte stream: files in a seeded order, wrapping, forever.
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  std::vector<size_t> order(texts.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  size_t file = 0, offset = 0;
  auto next_byte = [&]() {
    const std::string& t = texts[order[file % order.size()]];
    const unsigned char c = static_cast<unsigned char>(t[offset]);
    if (++offset == t.size()) {
      offset = 0;
      ++file;
    }
    return static_cast<int>(c);
  };
  std::printf("| remembered tokens | ns per token (query + append) | bytes held | bytes per token | queries with a match |\n");
  std::printf("|---:|---:|---:|---:|---:|\n");
  for (int64_t n : sizes) {
    mnemo::datastore::HistoryIndex index(n + probe);
    file = 0;
    offset = 0;
    for (int64_t i = 0; i < n; ++i) index.Append(next_byte(), 1);
    int matched = 0;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < probe; ++i) {
      const mnemo::datastore::RecallPrediction p = index.Query();
      matched += p.occurrences > 0 ? 1 : 0;
      index.Append(next_byte(), 1);
    }
    const double ns =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() /
        probe;
    std::printf("| %lld | %.0f | %lld | %.1f | %.1f%% |\n", static_cast<long long>(n), ns,
                static_cast<long long>(index.bytes()),
                static_cast<double>(index.bytes()) / index.size(), 100.0 * matched / probe);
    std::fflush(stdout);
  }
  return 0;
}
