// Mode planning, the Markdown/JSON report and the issue-3 target verdicts.
#include "engine/eval/report.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "engine/eval/plot.h"
#include "nlohmann/json.hpp"
#include "tests/engine/eval/eval_test_util.h"

namespace mnemo::eval {
namespace {

ScoreTotals Totals(double bpb, int64_t bytes, double avg_layers) {
  ScoreTotals t;
  t.bytes = bytes;
  t.logprob = -bpb * std::log(2.0) * static_cast<double>(bytes);
  t.layers = static_cast<int64_t>(avg_layers * static_cast<double>(bytes));
  return t;
}

// A report as mnemo-eval would fill it: bpb falls along the ladder.
EvalReport SampleReport() {
  EvalReport r;
  r.model_dir = "models/tiny";
  r.config = testing::TinyConfig();
  r.config.n_layers = 6;
  r.files = {"a.py", "b.py"};
  r.file_bytes = {40000, 60000};
  r.data_source = "split.json";
  double bpb = 2.0;
  for (const MemoryMode& m : PlanMemoryModes(r.config, {4096, 16384, 65536})) {
    r.modes.push_back(ModeResult{m, Totals(bpb, 100000, 6), {bpb, bpb}, 1.0});
    bpb -= 0.1;
  }
  r.exits.push_back(ExitResult{2.0f, Totals(1.50, 100000, 6.0), 1.0});
  r.exits.push_back(ExitResult{0.9f, Totals(1.52, 100000, 3.3), 1.0});
  r.exits.push_back(ExitResult{0.5f, Totals(1.80, 100000, 2.0), 1.0});
  r.exit_memory = "XL + compressive + kNN 64";
  PasskeyResult on{8192, true, 16384, 19, 20, 99, {"12345"}, {"12345"}, 3.0};
  PasskeyResult off{8192, false, 0, 0, 20, 20, {"12345"}, {"00000"}, 3.0};
  r.passkey = {on, off};
  return r;
}

TEST(ReportTest, PlanSkipsWhatTheModelLacks) {
  model::ModelConfig c = testing::TinyConfig();
  EXPECT_EQ(PlanMemoryModes(c, {4096, 65536}).size(), 5u);
  c.cmem_len = 0;
  c.knn_layer = -1;
  std::vector<MemoryMode> modes = PlanMemoryModes(c, {4096});
  ASSERT_EQ(modes.size(), 4u);
  EXPECT_TRUE(modes[0].no_memory);
  EXPECT_TRUE(modes[1].skip_reason.empty());
  EXPECT_FALSE(modes[2].skip_reason.empty());
  EXPECT_FALSE(modes[3].skip_reason.empty());
  EXPECT_EQ(modes[3].options.knn_mem_len, 4096);
  EXPECT_EQ(FormatEntries(65536), "64K");
  EXPECT_EQ(FormatEntries(1 << 20), "1M");
  EXPECT_EQ(FormatEntries(1000), "1000");
}

TEST(ReportTest, MarkdownHasEveryRow) {
  EvalReport r = SampleReport();
  r.modes[2].mode.skip_reason = "model has no compressive memory (cmem_len = 0)";
  const std::string md = RenderMarkdown(r);
  for (const char* label : {"| no memory |", "| XL memory |", "| XL + compressive |",
                            "| XL + compressive + kNN 4K |", "| XL + compressive + kNN 16K |",
                            "| XL + compressive + kNN 64K |"}) {
    EXPECT_TRUE(absl::StrContains(md, label)) << label << "\n" << md;
  }
  EXPECT_TRUE(absl::StrContains(md, "skipped: model has no compressive memory"));
  EXPECT_TRUE(absl::StrContains(md, "| full depth | 6.00 | 100% | 1.5000 |"));
  EXPECT_TRUE(absl::StrContains(md, "| 0.90 | 3.30 | 55% |"));
  EXPECT_TRUE(absl::StrContains(md, "| 8192 | on | 16K | 19/20 (95%)"));
  EXPECT_TRUE(absl::StrContains(md, "eval_memory.png"));
  EXPECT_TRUE(absl::StrContains(md, "eval_exit.png"));
  EXPECT_TRUE(absl::StrContains(md, "## Targets"));
}

TEST(ReportTest, TargetsVerdicts) {
  EvalReport r = SampleReport();
  std::vector<TargetCheck> checks = CheckTargets(r);
  ASSERT_GE(checks.size(), 5u);
  // 1.5 / 2.0 = 0.75 <= 0.85; the ladder falls at every step.
  EXPECT_EQ(checks[0].state, TargetCheck::State::kMet) << checks[0].detail;
  EXPECT_EQ(checks[1].state, TargetCheck::State::kMet) << checks[1].detail;
  EXPECT_EQ(checks[2].state, TargetCheck::State::kInfo);
  // 3.3 of 6 layers = 55% at +1.3% bpb.
  EXPECT_EQ(checks[3].state, TargetCheck::State::kMet) << checks[3].detail;
  EXPECT_EQ(checks[4].state, TargetCheck::State::kMet) << checks[4].detail;

  // A ladder step that does not help, an exit that costs too much, a passkey leak.
  r.modes[2].totals = Totals(1.95, 100000, 6);  // XL + compressive worse than XL (1.9)
  r.exits[1].totals = Totals(1.60, 100000, 3.3);
  r.passkey[1].correct = 10;
  checks = CheckTargets(r);
  EXPECT_EQ(checks[1].state, TargetCheck::State::kNotMet);
  EXPECT_EQ(checks[3].state, TargetCheck::State::kNotMet);
  EXPECT_EQ(checks[4].state, TargetCheck::State::kNotMet);
}

TEST(ReportTest, JsonAndPlotData) {
  const EvalReport r = SampleReport();
  nlohmann::json j = nlohmann::json::parse(RenderJson(r));
  ASSERT_EQ(j["modes"].size(), r.modes.size());
  EXPECT_EQ(j["modes"][0]["key"], "none");
  EXPECT_NEAR(j["modes"][0]["bpb"].get<double>(), 2.0, 1e-9);
  EXPECT_EQ(j["exit"].size(), 3u);
  EXPECT_TRUE(j["exit"][0]["full_depth"].get<bool>());
  EXPECT_EQ(j["exit"][1]["threshold"].get<double>(), 0.9);
  EXPECT_EQ(j["passkey"][0]["correct"], 19);
  EXPECT_EQ(j["model"]["config"]["n_layers"], 6);
  EXPECT_FALSE(j["targets"].empty());

  const std::string memory = MemoryPlotData(r);
  EXPECT_TRUE(absl::StrContains(memory, "\"no memory\" 2.000000\n"));
  const std::string exit = ExitPlotData(r);
  // Sorted by average layers: 0.50 (2.0 layers) first, full depth last.
  EXPECT_LT(exit.find("\"0.50\""), exit.find("\"0.90\""));
  EXPECT_LT(exit.find("\"0.90\""), exit.find("\"full\""));
}

}  // namespace
}  // namespace mnemo::eval
