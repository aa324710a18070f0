#include "clients/cpp/bench/plot.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

extern char** environ;

namespace mnemo::bench {
namespace {

namespace fs = std::filesystem;

// Points per CDF curve: enough for a smooth line, few enough for a small data file.
constexpr size_t kCdfPoints = 400;
// Log-scale axes cannot show 0: gaps of 0 (tokens that arrived in one chunk) sit at 1 us.
constexpr double kMinPlottedMs = 1e-3;

std::string CdfData(const std::vector<double>& sorted_s) {
  std::string data = "# ms fraction\n";
  const size_t n = sorted_s.size();
  if (n == 0) return data;
  const size_t points = std::min(n, kCdfPoints);
  for (size_t k = 0; k < points; ++k) {
    const size_t i = points == 1 ? n - 1 : k * (n - 1) / (points - 1);
    absl::StrAppendFormat(&data, "%.6f %.6f\n", std::max(sorted_s[i] * 1e3, kMinPlottedMs),
                          static_cast<double>(i + 1) / static_cast<double>(n));
  }
  return data;
}

std::string TimelineData(const LevelResult& r) {
  std::string data = "# t_mid_s tokens_per_s width_s\n";
  const size_t n = r.timeline_tokens_per_s.size();
  for (size_t i = 0; i < n; ++i) {
    // The last bucket ends with the window (it may be shorter or, merged, longer).
    const double start = static_cast<double>(i) * r.timeline_bucket_s;
    const double end = i + 1 == n ? r.window_s : start + r.timeline_bucket_s;
    absl::StrAppendFormat(&data, "%.4f %.3f %.4f\n", (start + end) / 2,
                          r.timeline_tokens_per_s[i], end - start);
  }
  return data;
}

std::string ExitData(const LevelResult& r) {
  std::string data = "# layer tokens\n";
  for (size_t layer = 1; layer < r.exit_layer_counts.size(); ++layer) {
    absl::StrAppendFormat(&data, "%d %d\n", layer, r.exit_layer_counts[layer]);
  }
  return data;
}

std::string SweepData(const std::vector<LevelResult>& levels) {
  std::string data = "# streams tokens_per_s linear ttft_p50_ms ttft_p99_ms itl_p50_ms itl_p99_ms\n";
  const LevelResult& first = levels.front();
  const double per_stream =
      first.config.concurrency > 0 ? first.output_tokens_per_s / first.config.concurrency : 0;
  for (const LevelResult& r : levels) {
    absl::StrAppendFormat(&data, "%d %.3f %.3f %.4f %.4f %.4f %.4f\n", r.config.concurrency,
                          r.output_tokens_per_s, per_stream * r.config.concurrency,
                          std::max(r.ttft.p50 * 1e3, kMinPlottedMs),
                          std::max(r.ttft.p99 * 1e3, kMinPlottedMs),
                          std::max(r.itl.p50 * 1e3, kMinPlottedMs),
                          std::max(r.itl.p99 * 1e3, kMinPlottedMs));
  }
  return data;
}

absl::Status WriteFile(const fs::path& path, const std::string& data) {
  std::ofstream file(path, std::ios::binary);
  file << data;
  file.close();
  if (!file) return absl::InternalError(absl::StrCat("cannot write ", path.string()));
  return absl::OkStatus();
}

bool HasGnuplotQuote(const std::string& s) {
  return s.find_first_of("'\"\\\n") != std::string::npos;
}

absl::Status RunGnuplot(const std::string& expression, const std::string& script) {
  std::vector<std::string> args = {"gnuplot", "-e", expression, script};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int error = posix_spawnp(&pid, "gnuplot", nullptr, nullptr, argv.data(), environ);
  if (error == ENOENT) {
    return absl::FailedPreconditionError(
        "gnuplot is not installed (apt-get install gnuplot-nox); plot not drawn");
  }
  if (error != 0) {
    return absl::InternalError(absl::StrCat("cannot run gnuplot: ", std::strerror(error)));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return absl::InternalError("waitpid(gnuplot) failed");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat("gnuplot failed (status ", status, ") on ", script));
  }
  return absl::OkStatus();
}

}  // namespace

std::string DefaultPlotScript() {
#ifdef MNEMO_SOURCE_DIR
  return absl::StrCat(MNEMO_SOURCE_DIR, "/scripts/plot_bench.gp");
#else
  return "";
#endif
}

absl::Status WritePlot(const std::vector<LevelResult>& levels, const std::string& title,
                       const std::string& png_path, const std::string& script) {
  if (levels.empty()) return absl::FailedPreconditionError("no results to plot");
  std::error_code error;
  if (script.empty() || !fs::is_regular_file(script, error)) {
    return absl::FailedPreconditionError(
        absl::StrCat("plot script not found: '", script, "' (pass --plot_script)"));
  }
  const std::string png = fs::absolute(png_path, error).string();
  for (const std::string* s : {&png, &script}) {
    if (HasGnuplotQuote(*s)) {
      return absl::InvalidArgumentError(absl::StrCat("path has quote characters: ", *s));
    }
  }

  std::string pattern = (fs::temp_directory_path(error) / "mnemo-bench-plot.XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot create a directory like ", pattern));
  }
  const fs::path dir = pattern;
  if (HasGnuplotQuote(dir.string())) {
    fs::remove_all(dir, error);
    return absl::InvalidArgumentError(absl::StrCat("temporary path has quote characters: ",
                                                   dir.string()));
  }
  const bool sweep = levels.size() > 1;
  absl::Status status;
  if (sweep) {
    status.Update(WriteFile(dir / "sweep.dat", SweepData(levels)));
  } else {
    const LevelResult& r = levels.front();
    status.Update(WriteFile(dir / "ttft.dat", CdfData(r.ttft_sorted)));
    status.Update(WriteFile(dir / "itl.dat", CdfData(r.itl_sorted)));
    status.Update(WriteFile(dir / "timeline.dat", TimelineData(r)));
    status.Update(WriteFile(dir / "exit.dat", ExitData(r)));
  }
  const std::string safe_title = absl::StrReplaceAll(title, {{"'", ""}, {"\"", ""},
                                                             {"\\", ""}, {"\n", " "}});
  fs::remove(png, error);  // so a PNG found afterwards is this run's
  if (status.ok()) {
    status = RunGnuplot(absl::StrFormat("dir='%s'; out='%s'; mode='%s'; title='%s'",
                                        dir.string(), png, sweep ? "sweep" : "level", safe_title),
                        script);
  }
  fs::remove_all(dir, error);
  if (status.ok() && (!fs::is_regular_file(png, error) || fs::file_size(png, error) == 0)) {
    status = absl::InternalError(absl::StrCat("gnuplot wrote no image to ", png));
  }
  return status;
}

}  // namespace mnemo::bench
