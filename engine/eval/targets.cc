// CheckTargets: the issue-3 target lines, judged from an EvalReport.
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/eval/report.h"

namespace mnemo::eval {
namespace {

using State = TargetCheck::State;

constexpr double kFullMemoryRatio = 0.85;  // full memory bpb <= 0.85 x no memory
constexpr double kExitDepthFraction = 0.60;
constexpr double kExitBpbSlack = 0.03;
constexpr double kPasskeyPass = 0.90;  // "reproduces the digits"
constexpr double kPasskeyFail = 0.10;  // "fails without it"

TargetCheck FullMemoryTarget(const EvalReport& report) {
  TargetCheck check;
  check.target = "bpb with full memory (4) <= 0.85 x bpb without memory (1)";
  const ModeResult* none = FindMode(report, "none");
  const ModeResult* full = FullMemoryMode(report);
  if (none == nullptr || full == nullptr || full == none) return check;
  const double ratio = full->totals.Bpb() / none->totals.Bpb();
  check.state = ratio <= kFullMemoryRatio ? State::kMet : State::kNotMet;
  check.detail = absl::StrFormat("%s %.4f / no memory %.4f = %.3f", full->mode.label,
                                 full->totals.Bpb(), none->totals.Bpb(), ratio);
  if (full->mode.key.find("knn") == std::string::npos) {
    absl::StrAppend(&check.detail, " (no kNN row ran, so this is not memory kind 4)");
    check.state = State::kNotMet;
  }
  return check;
}

TargetCheck LadderTarget(const EvalReport& report) {
  TargetCheck check;
  check.target = "each memory kind helps (1 > 2 > 3 > 4)";
  const ModeResult* none = FindMode(report, "none");
  const ModeResult* xl = FindMode(report, "xl");
  const ModeResult* cmem = FindMode(report, "xl_cmem");
  const ModeResult* full = FullMemoryMode(report);
  if (none == nullptr || xl == nullptr) return check;
  std::vector<const ModeResult*> ladder = {none, xl};
  if (cmem != nullptr) ladder.push_back(cmem);
  if (full != nullptr && full != cmem && full != xl) ladder.push_back(full);
  bool strictly = true;
  std::vector<std::string> steps;
  for (size_t i = 1; i < ladder.size(); ++i) {
    const double before = ladder[i - 1]->totals.Bpb();
    const double after = ladder[i]->totals.Bpb();
    strictly = strictly && after < before;
    steps.push_back(absl::StrFormat("%s %+.4f", ladder[i]->mode.label, after - before));
  }
  const bool complete = ladder.size() == 4;
  check.state = strictly && complete ? State::kMet : State::kNotMet;
  check.detail = absl::StrCat(absl::StrJoin(steps, "; "),
                              complete ? "" : " (some memory kinds did not run)");
  return check;
}

TargetCheck AbsoluteTarget(const EvalReport& report) {
  TargetCheck check;
  check.target = "absolute bpb of the model on held-out files (as low as the budget allows)";
  const ModeResult* full = FullMemoryMode(report);
  if (full == nullptr) return check;
  check.state = State::kInfo;
  check.detail = absl::StrFormat("%.4f bpb (%s) over %d files, %d bytes", full->totals.Bpb(),
                                 full->mode.label, report.files.size(), full->totals.bytes);
  return check;
}

TargetCheck ExitTarget(const EvalReport& report) {
  TargetCheck check;
  check.target = "early exit: some threshold uses <= 60% of depth with bpb within 3% of full depth";
  const ExitResult* full = FullDepthExit(report);
  if (full == nullptr) return check;
  const double depth = report.config.n_layers;
  const ExitResult* best = nullptr;  // fewest layers among those within the bpb slack
  for (const ExitResult& e : report.exits) {
    if (e.full_depth()) continue;
    if (e.totals.Bpb() > full->totals.Bpb() * (1.0 + kExitBpbSlack)) continue;
    if (best == nullptr || e.totals.AvgLayers() < best->totals.AvgLayers()) best = &e;
  }
  if (best == nullptr) {
    check.state = State::kNotMet;
    check.detail = "no threshold keeps bpb within 3% of full depth";
    return check;
  }
  const double fraction = best->totals.AvgLayers() / depth;
  check.state = fraction <= kExitDepthFraction ? State::kMet : State::kNotMet;
  check.detail = absl::StrFormat(
      "threshold %.2f: %.2f of %d layers (%.0f%%), bpb %.4f vs %.4f full depth (%+.2f%%)",
      best->threshold, best->totals.AvgLayers(), report.config.n_layers, 100.0 * fraction,
      best->totals.Bpb(), full->totals.Bpb(),
      100.0 * (best->totals.Bpb() / full->totals.Bpb() - 1.0));
  return check;
}

std::vector<TargetCheck> PasskeyTargets(const EvalReport& report) {
  std::map<int64_t, std::pair<const PasskeyResult*, const PasskeyResult*>> by_distance;
  for (const PasskeyResult& p : report.passkey) {
    auto& cell = by_distance[p.distance];
    (p.knn ? cell.first : cell.second) = &p;
  }
  std::vector<TargetCheck> checks;
  for (const auto& [distance, cell] : by_distance) {
    TargetCheck check;
    check.target = absl::StrFormat(
        "passkey at %s bytes: reproduced with kNN on (>= %.0f%%), fails without (<= %.0f%%)",
        FormatEntries(distance), 100 * kPasskeyPass, 100 * kPasskeyFail);
    const PasskeyResult* on = cell.first;
    const PasskeyResult* off = cell.second;
    if (on == nullptr || off == nullptr) {
      check.detail = on == nullptr ? "kNN-on run missing" : "kNN-off run missing";
      checks.push_back(check);
      continue;
    }
    check.state = on->Accuracy() >= kPasskeyPass && off->Accuracy() <= kPasskeyFail
                      ? State::kMet
                      : State::kNotMet;
    check.detail = absl::StrFormat("kNN on %d/%d, off %d/%d", on->correct, on->trials,
                                   off->correct, off->trials);
    checks.push_back(check);
  }
  if (checks.empty()) {
    TargetCheck check;
    check.target = "passkey at 8K / 32K / 128K bytes with kNN on vs off (run with --passkey)";
    checks.push_back(check);
  }
  return checks;
}

}  // namespace

const char* TargetStateName(TargetCheck::State state) {
  switch (state) {
    case State::kMet: return "met";
    case State::kNotMet: return "not met";
    case State::kNotRun: return "not run";
    case State::kInfo: return "stated";
  }
  return "?";
}

std::vector<TargetCheck> CheckTargets(const EvalReport& report) {
  std::vector<TargetCheck> checks = {FullMemoryTarget(report), LadderTarget(report),
                                     AbsoluteTarget(report), ExitTarget(report)};
  for (TargetCheck& c : PasskeyTargets(report)) checks.push_back(std::move(c));
  return checks;
}

}  // namespace mnemo::eval
