#include "engine/eval/plot.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "engine/eval/report.h"

namespace mnemo::eval {
namespace {

std::string Quoted(const std::string& label) {
  return absl::StrCat("\"", absl::StrReplaceAll(label, {{"\"", "'"}}), "\"");
}

}  // namespace

std::string MemoryPlotData(const EvalReport& report) {
  std::string data = "# label bpb\n";
  for (const ModeResult& m : report.modes) {
    if (!m.mode.skip_reason.empty() || m.totals.bytes == 0) continue;
    absl::StrAppendFormat(&data, "%s %.6f\n", Quoted(m.mode.label), m.totals.Bpb());
  }
  return data;
}

std::string ExitPlotData(const EvalReport& report) {
  std::vector<const ExitResult*> rows;
  for (const ExitResult& e : report.exits) rows.push_back(&e);
  std::stable_sort(rows.begin(), rows.end(), [](const ExitResult* a, const ExitResult* b) {
    return a->totals.AvgLayers() < b->totals.AvgLayers();
  });
  std::string data = "# label avg_layers bpb\n";
  for (const ExitResult* e : rows) {
    const std::string label =
        e->full_depth() ? std::string("full") : absl::StrFormat("%.2f", e->threshold);
    absl::StrAppendFormat(&data, "%s %.4f %.6f\n", Quoted(label), e->totals.AvgLayers(),
                          e->totals.Bpb());
  }
  return data;
}

std::string DefaultPlotScript() {
#ifdef MNEMO_SOURCE_DIR
  return absl::StrCat(MNEMO_SOURCE_DIR, "/scripts/plot_eval.gp");
#else
  return "";
#endif
}

absl::Status RunPlotScript(const std::string& script, const std::string& out_dir) {
  std::error_code error;
  if (script.empty() || !std::filesystem::is_regular_file(script, error)) {
    return absl::FailedPreconditionError(absl::StrCat("plot script not found: '", script, "'"));
  }
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    return absl::FailedPreconditionError(
        "gnuplot is not installed (apt-get install gnuplot-nox); plots not drawn");
  }
  for (const std::string* s : {&script, &out_dir}) {
    if (s->find_first_of("'\"\\$`") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("path has quote characters: ", *s));
    }
  }
  const std::string command =
      absl::StrCat("gnuplot -e \"dir='", out_dir, "'\" '", script, "'");
  const int rc = std::system(command.c_str());
  if (rc != 0) return absl::InternalError(absl::StrCat("`", command, "` exited with ", rc));
  return absl::OkStatus();
}

}  // namespace mnemo::eval
