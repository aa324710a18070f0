// mnemo-calibrate: Learn-then-Test calibration of a model's CALM exit threshold (issue 5), for
// one confidence measure.
//
//   mnemo-calibrate --model DIR [--measure softmax|saturation|classifier]
//                   [--corpus /usr/lib/python3.11] [--files 64] [--bytes_per_file 4096]
//                   [--delta 0.1[,0.2...]] [--epsilon 0.05] [--candidates 0.99,0.95,...]
//                   [--write [--make_default]] [--json FILE] [--threads N]
//
// Measures, on held-out texts that mnemo-eval does not score (engine/calm/calibration_split.h),
// the teacher-forced token-disagreement risk of each candidate threshold against the full
// model, tests candidates strict to loose with Hoeffding–Bentkus p-values and fixed-sequence
// testing, prints a table per δ and the chosen λ, and with --write stores it in
// DIR/config.json as the measure's threshold (exit_threshold for softmax response,
// exit_thresholds.NAME for the others). Progress on stderr. Logic lives in engine/calm.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "engine/calm/agreement.h"
#include "engine/calm/calibration_split.h"
#include "engine/calm/config_update.h"
#include "engine/calm/learn_then_test.h"
#include "engine/eval/corpus.h"
#include "engine/eval/progress.h"
#include "engine/model/model.h"
#include "engine/util/cpu_backend.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, model, "", "model directory (config.json + model.safetensors)");
ABSL_FLAG(std::string, corpus, "/usr/lib/python3.11",
          "directory of calibration candidates; with MODEL/split.json only its held-out files "
          "below --eval_min_bytes are used");
ABSL_FLAG(std::string, extensions, ".py", "file suffixes to use (comma-separated; empty = all)");
ABSL_FLAG(int, files, 64, "calibration texts (files) to use at most; one text per file");
ABSL_FLAG(int64_t, bytes_per_file, 4096, "bytes taken from the start of each file");
ABSL_FLAG(int64_t, min_bytes, 2048, "skip files shorter than this");
ABSL_FLAG(int64_t, eval_min_bytes, mnemo::calm::kEvalMinBytes,
          "held-out files this large are mnemo-eval's test set and are never used here "
          "(mnemo-eval's --min_bytes); 0 = no cap");
ABSL_FLAG(std::string, delta, "0.1",
          "risk tolerance δ (1 - token agreement); a comma list prints one table per value");
ABSL_FLAG(double, epsilon, 0.05, "allowed probability ε that the chosen λ's risk exceeds δ");
ABSL_FLAG(std::string, measure, "softmax",
          "confidence measure: softmax (response), saturation (hidden state) or classifier "
          "(MODEL/exit_classifier.safetensors, from mnemo-train --exit_classifier)");
ABSL_FLAG(std::string, candidates, "",
          "candidate thresholds (tested from the highest down); empty = the measure's "
          "default list");
ABSL_FLAG(bool, write, false,
          "store the chosen λ as the measure's threshold in MODEL/config.json");
ABSL_FLAG(bool, make_default, false,
          "with --write and a chosen λ: also make this measure the model's default "
          "(config.json exit_measure), the one requests that name none are served with");
ABSL_FLAG(std::string, json, "", "also write every measurement and table to this JSON file");
ABSL_FLAG(int, threads, 0, "LibTorch intra-op threads (0 = the machine's cores)");
ABSL_FLAG(int, chunk, 4096, "tokens per model call");
ABSL_FLAG(int, knn_mem_len, 0, "kNN memory entries (0 = the model's default)");

namespace {

namespace calm = mnemo::calm;
namespace ev = mnemo::eval;

int Fail(const std::string& message) {
  std::fprintf(stderr, "mnemo-calibrate: %s\n", message.c_str());
  return 1;
}

// Candidates from strict to loose. Saturation's cosines sit close to 1, so its grid is fine
// there; the classifier's confidence is a probability of agreeing with the full model.
const char* DefaultCandidates(mnemo::model::ExitMeasure measure) {
  switch (measure) {
    case mnemo::model::ExitMeasure::kSoftmaxResponse: return "0.99,0.95,0.9,0.85,0.8,0.7,0.6,0.5";
    case mnemo::model::ExitMeasure::kHiddenSaturation:
      return "0.999,0.998,0.995,0.99,0.98,0.97,0.95,0.9";
    case mnemo::model::ExitMeasure::kClassifier:
      return "0.995,0.99,0.98,0.97,0.96,0.95,0.93,0.9,0.85,0.8";
  }
  return "";
}

bool ParseDoubles(const std::string& text, std::vector<double>& out) {
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    double value;
    if (!absl::SimpleAtod(absl::StripAsciiWhitespace(part), &value)) return false;
    out.push_back(value);
  }
  return !out.empty();
}

std::string MarkdownTable(const calm::LttResult& r) {
  std::string out = absl::StrFormat(
      "## δ = %g, ε = %g (n = %d texts)\n\n"
      "| threshold | mean exit layer | layers saved | risk (mean per text) | risk (pooled) "
      "| p-value | accepted |\n|---:|---:|---:|---:|---:|---:|:---:|\n",
      r.delta, r.epsilon, r.texts);
  for (size_t j = 0; j < r.rows.size(); ++j) {
    const calm::LttRow& row = r.rows[j];
    absl::StrAppendFormat(&out, "| %g | %.2f | %.1f%% | %.4f | %.4f | %.3g | %s |\n",
                          row.threshold, row.mean_exit_layer, 100.0 * row.layers_saved, row.risk,
                          row.pooled_risk, row.p_value,
                          row.accepted ? (static_cast<int>(j) == r.chosen ? "**yes (chosen)**"
                                                                          : "yes")
                                       : "no");
  }
  if (r.calibrated()) {
    const calm::LttRow& c = r.rows[static_cast<size_t>(r.chosen)];
    absl::StrAppendFormat(&out,
                          "\nChosen λ = %g: mean exit layer %.2f (%.1f%% of layers saved), "
                          "calibration risk %.4f; P(risk > %g) <= %g.\n",
                          c.threshold, c.mean_exit_layer, 100.0 * c.layers_saved, c.risk, r.delta,
                          r.epsilon);
  } else {
    absl::StrAppendFormat(&out,
                          "\nNo threshold accepted: the measure's threshold stays %g (never "
                          "exit). %d texts are needed before even a zero empirical risk can "
                          "certify δ = %g at ε = %g.\n",
                          calm::kNeverExitThreshold, calm::MinimumTexts(r.delta, r.epsilon),
                          r.delta, r.epsilon);
  }
  return out;
}

nlohmann::json ToJson(const calm::LttResult& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const calm::LttRow& row : r.rows) {
    rows.push_back({{"threshold", row.threshold},
                    {"risk", row.risk},
                    {"pooled_risk", row.pooled_risk},
                    {"mean_exit_layer", row.mean_exit_layer},
                    {"layers_saved", row.layers_saved},
                    {"p_value", row.p_value},
                    {"accepted", row.accepted}});
  }
  nlohmann::json j = {{"delta", r.delta}, {"epsilon", r.epsilon}, {"texts", r.texts},
                      {"rows", rows},     {"calibrated", r.calibrated()},
                      {"threshold", r.threshold()}};
  return j;
}

int Run(int argc, char** argv) {
  const std::string model_dir = absl::GetFlag(FLAGS_model);
  if (model_dir.empty()) return Fail("--model DIR is required");
  auto measure = mnemo::model::ParseExitMeasure(absl::GetFlag(FLAGS_measure));
  if (!measure.ok()) return Fail(absl::StrCat("--measure: ", measure.status().message()));
  const char* measure_name = mnemo::model::ExitMeasureName(*measure);
  std::vector<double> deltas, candidate_values;
  if (!ParseDoubles(absl::GetFlag(FLAGS_delta), deltas)) return Fail("bad --delta");
  const std::string candidate_text = absl::GetFlag(FLAGS_candidates).empty()
                                         ? DefaultCandidates(*measure)
                                         : absl::GetFlag(FLAGS_candidates);
  if (!ParseDoubles(candidate_text, candidate_values)) return Fail("bad --candidates");
  if (absl::GetFlag(FLAGS_make_default) && !absl::GetFlag(FLAGS_write)) {
    return Fail("--make_default needs --write");
  }
  const double epsilon = absl::GetFlag(FLAGS_epsilon);
  for (double d : deltas) {
    if (!(d > 0.0 && d < 1.0)) return Fail("--delta values must lie in (0, 1)");
  }
  if (!(epsilon > 0.0 && epsilon < 1.0)) return Fail("--epsilon must lie in (0, 1)");
  if (absl::GetFlag(FLAGS_write) && deltas.size() != 1) {
    return Fail("--write needs exactly one --delta");
  }
  std::vector<float> candidates;
  for (double c : candidate_values) {
    if (!(c >= 0.0)) return Fail("--candidates must be >= 0");
    candidates.push_back(static_cast<float>(c));
  }
  std::sort(candidates.begin(), candidates.end(), std::greater<float>());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());

  int threads = absl::GetFlag(FLAGS_threads);
  if (threads <= 0) threads = std::max(1u, std::thread::hardware_concurrency());
  at::set_num_threads(threads);

  auto model = mnemo::model::Model::Load(model_dir, {});
  if (!model.ok()) return Fail(std::string(model.status().message()));
  const mnemo::model::ModelConfig& config = (*model)->config();
  if (absl::Status s = (*model)->CheckExitMeasure(*measure); !s.ok()) {
    return Fail(std::string(s.message()));
  }

  // The calibration split: held out from training, not scored by mnemo-eval.
  auto held_out = calm::ReadHeldOut(model_dir);
  if (!held_out.ok()) return Fail(std::string(held_out.status().message()));
  auto corpus = calm::ScanCorpus(absl::GetFlag(FLAGS_corpus));
  if (!corpus.ok()) return Fail(std::string(corpus.status().message()));
  calm::SplitRule rule;
  rule.extensions = absl::StrSplit(absl::GetFlag(FLAGS_extensions), ',', absl::SkipWhitespace());
  rule.min_bytes = absl::GetFlag(FLAGS_min_bytes);
  rule.eval_min_bytes = absl::GetFlag(FLAGS_eval_min_bytes);
  const std::vector<std::string> paths = calm::ChooseCalibrationFiles(*corpus, *held_out, rule);
  if (!held_out->has_value()) {
    std::fprintf(stderr,
                 "mnemo-calibrate: warning: %s/split.json is missing, so files the model was "
                 "trained on may be used for calibration\n",
                 model_dir.c_str());
  }
  if (paths.empty()) return Fail("no calibration files qualify (see --corpus, --min_bytes)");
  auto documents = ev::LoadCorpus(
      paths, ev::CorpusOptions{rule.min_bytes, absl::GetFlag(FLAGS_files),
                               absl::GetFlag(FLAGS_bytes_per_file)});
  if (!documents.ok()) return Fail(std::string(documents.status().message()));
  std::vector<calm::CalibrationText> texts;
  int64_t positions = 0;
  for (const ev::Document& d : *documents) {
    texts.push_back(calm::TextFromTokenizer(d.path, d.bytes, (*model)->tokenizer()));
    positions += static_cast<int64_t>(texts.back().tokens.size());
  }
  const int64_t n = static_cast<int64_t>(texts.size());

  std::fprintf(stderr,
               "mnemo-calibrate: %s (%d layers), measure %s, %lld texts / %lld tokens from "
               "%s (%s), %zu candidates + full depth, %d threads\n",
               model_dir.c_str(), config.n_layers, measure_name, static_cast<long long>(n),
               static_cast<long long>(positions), absl::GetFlag(FLAGS_corpus).c_str(),
               held_out->has_value() ? "held-out files below --eval_min_bytes" : "all files",
               candidates.size(), threads);
  for (double d : deltas) {
    const int64_t needed = calm::MinimumTexts(d, epsilon);
    if (n < needed) {
      std::fprintf(stderr,
                   "mnemo-calibrate: warning: δ = %g at ε = %g needs at least %lld texts to "
                   "accept anything; only %lld qualify\n",
                   d, epsilon, static_cast<long long>(needed), static_cast<long long>(n));
    }
  }

  ev::ProgressMeter progress(positions * static_cast<int64_t>(candidates.size() + 1), stderr);
  calm::AgreementOptions options;
  options.chunk = absl::GetFlag(FLAGS_chunk);
  options.memory.knn_mem_len = absl::GetFlag(FLAGS_knn_mem_len);
  options.measure = *measure;
  auto measured = calm::MeasureAgreement(
      **model, texts, candidates, options, [&](const std::string& stage, int64_t done) {
        progress.SetStage(stage);
        progress.Advance(done);
      });
  progress.Finish();
  if (!measured.ok()) return Fail(std::string(measured.status().message()));
  const double seconds = progress.ElapsedSeconds();

  std::string report = absl::StrFormat(
      "# mnemo-calibrate\n\n- Command: `%s`\n- Model: `%s` (%d layers)\n- Measure: %s\n"
      "- Calibration: %d "
      "texts, %d tokens (first %d bytes of each file; files from `%s`, %s)\n- Risk: teacher-"
      "forced token disagreement with the full model, averaged per text then over texts\n"
      "- Run: %.0f s, %d threads, %.0f tokens/s over %zu passes\n\n",
      absl::StrJoin(argv, argv + argc, " "), model_dir, config.n_layers, measure_name, n,
      positions,
      absl::GetFlag(FLAGS_bytes_per_file), absl::GetFlag(FLAGS_corpus),
      held_out->has_value()
          ? absl::StrFormat("held out in split.json and under %d bytes", rule.eval_min_bytes)
          : std::string("no split.json: any file"),
      seconds, threads, positions * static_cast<double>(candidates.size() + 1) / seconds,
      candidates.size() + 1);
  std::vector<calm::LttResult> results;
  for (double d : deltas) {
    results.push_back(calm::LearnThenTest(*measured, config.n_layers, d, epsilon));
    absl::StrAppend(&report, MarkdownTable(results.back()), "\n");
  }
  std::fputs(report.c_str(), stdout);

  bool written = false;
  if (absl::GetFlag(FLAGS_write)) {
    const calm::LttResult& r = results[0];
    const std::string field = *measure == mnemo::model::ExitMeasure::kSoftmaxResponse
                                  ? std::string("exit_threshold")
                                  : absl::StrCat("exit_thresholds.", measure_name);
    if (r.calibrated()) {
      if (absl::Status s = calm::WriteExitThreshold(model_dir, r.threshold(), *measure);
          !s.ok()) {
        return Fail(std::string(s.message()));
      }
      written = true;
      std::printf("Wrote %s %g to %s/config.json\n", field.c_str(), r.threshold(),
                  model_dir.c_str());
      if (absl::GetFlag(FLAGS_make_default)) {
        if (absl::Status s = calm::WriteDefaultExitMeasure(model_dir, *measure); !s.ok()) {
          return Fail(std::string(s.message()));
        }
        std::printf("Wrote exit_measure %s (the default measure) to %s/config.json\n",
                    measure_name, model_dir.c_str());
      }
    } else {
      std::printf("Nothing written: %s/config.json keeps its %s\n", model_dir.c_str(),
                  field.c_str());
    }
  }

  const std::string json_path = absl::GetFlag(FLAGS_json);
  if (!json_path.empty()) {
    nlohmann::json files = nlohmann::json::array();
    for (const calm::CalibrationText& t : texts) {
      files.push_back({{"path", t.name}, {"tokens", t.tokens.size()}});
    }
    nlohmann::json measurements = nlohmann::json::array();
    for (const calm::CandidateMeasurement& m : *measured) {
      std::vector<double> risks;
      for (const calm::TextAgreement& t : m.texts) risks.push_back(t.Risk());
      measurements.push_back({{"threshold", m.threshold},
                              {"mean_risk", m.MeanRisk()},
                              {"pooled_risk", m.PooledRisk()},
                              {"mean_exit_layer", m.MeanExitLayer()},
                              {"seconds", m.seconds},
                              {"text_risks", risks}});
    }
    nlohmann::json tables = nlohmann::json::array();
    for (const calm::LttResult& r : results) tables.push_back(ToJson(r));
    nlohmann::json j = {{"command", absl::StrJoin(argv, argv + argc, " ")},
                        {"model", model_dir},
                        {"measure", measure_name},
                        {"corpus", absl::GetFlag(FLAGS_corpus)},
                        {"split", held_out->has_value() ? "split.json held-out, below "
                                                          "eval_min_bytes"
                                                        : "all files"},
                        {"eval_min_bytes", rule.eval_min_bytes},
                        {"bytes_per_file", absl::GetFlag(FLAGS_bytes_per_file)},
                        {"epsilon", epsilon},
                        {"threads", threads},
                        {"seconds", seconds},
                        {"files", files},
                        {"measurements", measurements},
                        {"tables", tables},
                        {"written", written}};
    std::ofstream out(json_path);
    out << j.dump(2) << "\n";
    if (!out) return Fail(absl::StrCat("cannot write ", json_path));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  mnemo::util::ConfigureCpuRuntime(argv);
  absl::SetProgramUsageMessage(
      "mnemo-calibrate --model DIR [--measure softmax|saturation|classifier] [--corpus DIR] "
      "[--files N] [--bytes_per_file B] [--delta 0.1] [--epsilon 0.05] "
      "[--candidates 0.99,0.95,...] [--write [--make_default]] [--json FILE]");
  absl::ParseCommandLine(argc, argv);
  return Run(argc, argv);
}
