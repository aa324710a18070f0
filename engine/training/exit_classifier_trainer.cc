#include "engine/training/exit_classifier_trainer.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/calm/agreement.h"
#include "engine/calm/calibration_split.h"
#include "engine/model/exit_classifier.h"
#include "engine/model/model.h"
#include "engine/corpus/corpus.h"
#include "engine/util/files.h"
#include "engine/training/progress.h"
#include "engine/util/status_macros.h"

namespace mnemo::training {
namespace {

namespace fs = std::filesystem;

// The classifier's own split of the training files: a hash of the path with a prefix, so it
// is independent of the model's split (which hashed the bare path).
constexpr char kHoldoutSalt[] = "exit-classifier/";

absl::StatusOr<std::string> SplitRoot(const std::string& model_dir) {
  MNEMO_ASSIGN_OR_RETURN(std::string text,
                         util::ReadFile((fs::path(model_dir) / "split.json").string()));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("root") && j["root"].is_string()) {
    return j["root"].get<std::string>();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(model_dir, "/split.json has no \"root\": pass the corpus directory"));
}

// Up to `count` texts from `files` (in order), each its first `bytes` bytes.
absl::StatusOr<std::vector<calm::CalibrationText>> ReadTexts(const std::vector<corpus::CorpusFile>& files,
                                                             int count, int64_t bytes) {
  std::vector<calm::CalibrationText> texts;
  for (const corpus::CorpusFile& f : files) {
    if (static_cast<int>(texts.size()) >= count) break;
    MNEMO_ASSIGN_OR_RETURN(std::string content, util::ReadFile(f.path));
    if (static_cast<int64_t>(content.size()) > bytes) content.resize(static_cast<size_t>(bytes));
    texts.push_back(calm::TextFromBytes(f.path, content));
  }
  return texts;
}

nlohmann::json MetricsJson(const std::vector<ExitLayerMetrics>& layers) {
  nlohmann::json out = nlohmann::json::array();
  for (const ExitLayerMetrics& m : layers) {
    out.push_back({{"layer", m.layer},
                   {"positive_rate", m.positive_rate},
                   {"accuracy", m.accuracy},
                   {"auc", m.auc},
                   {"bce", m.bce},
                   {"base_bce", m.base_bce},
                   {"softmax_auc", m.softmax_auc},
                   {"saturation_auc", m.saturation_auc}});
  }
  return out;
}

}  // namespace

absl::StatusOr<ExitClassifierReport> TrainExitClassifier(const ExitClassifierTrainerOptions& o) {
  Progress timer("exit classifier");
  at::set_num_threads(o.threads > 0
                          ? o.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<model::Model> model, model::Model::Load(o.model_dir, {}));
  const model::ModelConfig& config = model->config();
  if (config.n_layers < 2) {
    return absl::InvalidArgumentError("a one-layer model has no layer to exit early after");
  }
  MNEMO_ASSIGN_OR_RETURN(std::optional<std::set<std::string>> held_out,
                         calm::ReadHeldOut(o.model_dir));
  if (!held_out.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat(o.model_dir,
                     "/split.json is missing: without it the classifier could be fitted on "
                     "the held-out texts that calibrate it"));
  }
  std::string corpus_dir = o.corpus_dir;
  if (corpus_dir.empty()) {
    MNEMO_ASSIGN_OR_RETURN(corpus_dir, SplitRoot(o.model_dir));
  }

  // Every corpus file the model's split did not hold out, then the classifier's own split.
  corpus::CorpusOptions scan;
  scan.extensions = o.extensions;
  scan.min_bytes = o.min_bytes;
  scan.validation_fraction = 0.0;
  MNEMO_ASSIGN_OR_RETURN(corpus::Corpus corpus, corpus::Corpus::Scan(corpus_dir, scan));
  std::vector<corpus::CorpusFile> fit_files, holdout_files;
  int skipped_held_out = 0;
  for (const corpus::CorpusFile& f : corpus.train) {
    if (held_out->count(calm::NormalisePath(f.path)) > 0) {
      ++skipped_held_out;
      continue;
    }
    (corpus::IsValidationFile(kHoldoutSalt + f.relative_path, o.holdout_fraction) ? holdout_files
                                                                          : fit_files)
        .push_back(f);
  }
  std::mt19937_64 rng(o.seed);
  std::shuffle(fit_files.begin(), fit_files.end(), rng);
  std::shuffle(holdout_files.begin(), holdout_files.end(), rng);
  MNEMO_ASSIGN_OR_RETURN(std::vector<calm::CalibrationText> fit_texts,
                         ReadTexts(fit_files, o.fit_files, o.bytes_per_file));
  MNEMO_ASSIGN_OR_RETURN(std::vector<calm::CalibrationText> holdout_texts,
                         ReadTexts(holdout_files, o.holdout_files, o.bytes_per_file));
  if (fit_texts.empty() || holdout_texts.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("too few training files in ", corpus_dir, " (", fit_files.size(), " to fit, ",
                     holdout_files.size(), " to hold out, of at least ", o.min_bytes, " bytes)"));
  }
  std::fprintf(stderr,
               "exit classifier: %s (%d layers, weights %s); %zu texts to fit, %zu held out "
               "(of %zu + %zu training files in %s; %d held-out files of the model skipped)\n",
               o.model_dir.c_str(), config.n_layers,
               model::WeightsChecksum(*model->transformer()).c_str(), fit_texts.size(),
               holdout_texts.size(), fit_files.size(), holdout_files.size(), corpus_dir.c_str(),
               skipped_held_out);

  // Examples: one full-depth pass per text.
  int64_t total_tokens = 0;
  for (const auto* texts : {&fit_texts, &holdout_texts}) {
    for (const calm::CalibrationText& t : *texts)
      total_tokens += static_cast<int64_t>(t.tokens.size());
  }
  model::ExitClassifier classifier(config.n_layers - 1, config.d_model, config.layer_norm_eps);
  Progress collecting("examples");
  int64_t done = 0;
  auto collect = [&](const std::vector<calm::CalibrationText>& texts, double keep,
                     uint64_t seed) -> absl::StatusOr<ExitExamples> {
    std::vector<ExitExamples> parts;
    for (size_t i = 0; i < texts.size(); ++i) {
      MNEMO_ASSIGN_OR_RETURN(
          ExitExamples part,
          CollectExitExamples(*model, *classifier, texts[i].tokens, keep, seed + i));
      parts.push_back(std::move(part));
      done += static_cast<int64_t>(texts[i].tokens.size());
      collecting.Update(static_cast<double>(done) / static_cast<double>(total_tokens),
                        absl::StrFormat("%d/%d tokens | %.0f tok/s", done, total_tokens,
                                        done / std::max(1e-9, collecting.elapsed_seconds())));
    }
    return ConcatExitExamples(parts);
  };
  MNEMO_ASSIGN_OR_RETURN(ExitExamples fit, collect(fit_texts, o.keep, o.seed));
  // Every position of the hold-out: metrics on the distribution calibration will see.
  MNEMO_ASSIGN_OR_RETURN(ExitExamples holdout, collect(holdout_texts, 1.0, o.seed + 1000003));
  collecting.Finish(absl::StrFormat("%d fit + %d held-out positions", fit.size(), holdout.size()));

  Progress fitting("fit");
  ExitFitOptions fit_options = o.fit;
  fit_options.seed = o.seed;
  const double train_bce =
      FitExitClassifier(*classifier, fit, fit_options, [&](double fraction, double bce) {
        fitting.Update(fraction, absl::StrFormat("train BCE %.4f", bce));
      });
  fitting.Finish(absl::StrFormat("train BCE %.4f", train_bce));

  ExitClassifierReport report;
  report.fit_texts = static_cast<int>(fit_texts.size());
  report.holdout_texts = static_cast<int>(holdout_texts.size());
  report.fit_examples = fit.size();
  report.holdout_examples = holdout.size();
  report.train_bce = train_bce;
  report.layers = EvaluateExitClassifier(*classifier, holdout, PositiveRates(fit));
  report.path = o.out_path.empty() ? (fs::path(o.model_dir) / model::kExitClassifierFile).string()
                                   : o.out_path;
  report.seconds = timer.elapsed_seconds();

  nlohmann::json summary = {{"command", o.command_line},
                            {"corpus", corpus_dir},
                            {"fit_texts", report.fit_texts},
                            {"holdout_texts", report.holdout_texts},
                            {"fit_positions", report.fit_examples},
                            {"holdout_positions", report.holdout_examples},
                            {"bytes_per_file", o.bytes_per_file},
                            {"keep", o.keep},
                            {"epochs", o.fit.epochs},
                            {"lr", o.fit.lr},
                            {"l2", o.fit.l2},
                            {"seed", o.seed},
                            {"train_bce", train_bce},
                            {"holdout", MetricsJson(report.layers)},
                            {"seconds", report.seconds}};
  MNEMO_RETURN_IF_ERROR(model::SaveExitClassifier(
      report.path, *classifier, model::WeightsChecksum(*model->transformer()),
      {{"mnemo_training", summary.dump()}, {"mnemo_model", config.name}}));
  return report;
}

std::string FormatExitClassifierReport(const ExitClassifierReport& r) {
  std::string out = absl::StrFormat(
      "Exit classifier: %s\n  fitted on %d texts (%d positions), measured on %d held-out texts "
      "(%d positions); train BCE %.4f; %.0f s\n\n"
      "| exit after layer | P(same token as full depth) | accuracy | BCE | constant's BCE "
      "| AUC | softmax response AUC | saturation AUC |\n"
      "|---:|---:|---:|---:|---:|---:|---:|---:|\n",
      r.path, r.fit_texts, r.fit_examples, r.holdout_texts, r.holdout_examples, r.train_bce,
      r.seconds);
  for (const ExitLayerMetrics& m : r.layers) {
    absl::StrAppendFormat(&out, "| %d | %.3f | %.3f | %.4f | %.4f | %.3f | %.3f | %.3f |\n",
                          m.layer, m.positive_rate, m.accuracy, m.bce, m.base_bce, m.auc,
                          m.softmax_auc, m.saturation_auc);
  }
  return out;
}

}  // namespace mnemo::training
