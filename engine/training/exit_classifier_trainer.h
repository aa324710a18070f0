// ExitClassifierTrainer: `mnemo-train --exit_classifier` — fits a trained model's CALM exit
// classifier (model/exit_classifier.h) on the frozen model and stores it beside the weights.
//
// Data: only the model's own training files, i.e. the corpus files its split.json does not
// hold out. The held-out files stay unseen, and with them the calibration split
// (engine/calm/calibration_split.h) and mnemo-eval's test files, so mnemo-calibrate's
// certificate for the classifier measure rests on texts neither the model nor the classifier
// saw. The training files are divided again, by a hash of their path, into the classifier's
// fit files and a classifier hold-out for the metrics printed at the end (texts the base model
// may have trained on, but the classifier did not). Each text is the first bytes_per_file bytes
// of a file, as in calibration; examples are a random `keep` share of its positions.
//
// Writes MODEL_DIR/exit_classifier.safetensors (the training summary in its metadata); the
// base model's files are not touched. Single-threaded apart from LibTorch's own threads.
#ifndef MNEMO_ENGINE_TRAINING_EXIT_CLASSIFIER_TRAINER_H_
#define MNEMO_ENGINE_TRAINING_EXIT_CLASSIFIER_TRAINER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/training/exit_examples.h"

namespace mnemo::training {

struct ExitClassifierTrainerOptions {
  std::string model_dir;                          // needs config.json, weights, split.json
  std::string corpus_dir;                         // empty = split.json's "root"
  std::vector<std::string> extensions = {".py"};  // empty = every text file
  int fit_files = 160;                            // texts the classifier is fitted on
  int holdout_files = 40;                         // texts its metrics are measured on
  double holdout_fraction = 0.15;                 // share of training files kept for metrics
  int64_t bytes_per_file = 2048;                  // each text: the first bytes of a file
  int64_t min_bytes = 1024;                       // shorter files are skipped
  double keep = 0.5;                              // share of a text's positions used
  ExitFitOptions fit;
  int threads = 0;           // LibTorch threads; 0 = all cores
  uint64_t seed = 1;         // file order and position sampling
  std::string command_line;  // recorded in the file's metadata
  std::string out_path;      // empty = MODEL_DIR/exit_classifier.safetensors
};

struct ExitClassifierReport {
  std::string path;  // the file written
  int fit_texts = 0, holdout_texts = 0;
  int64_t fit_examples = 0, holdout_examples = 0;  // positions (each has L-1 layer examples)
  double train_bce = 0.0;                          // last epoch, all layers
  std::vector<ExitLayerMetrics> layers;            // on the hold-out, per exitable layer
  double seconds = 0.0;
};

// Runs the whole job with progress on stderr. INVALID_ARGUMENT / NOT_FOUND for a bad model
// directory, a missing split.json (without it calibration texts could be fitted on), or too
// few files.
absl::StatusOr<ExitClassifierReport> TrainExitClassifier(
    const ExitClassifierTrainerOptions& options);

// The per-layer hold-out table, Markdown.
std::string FormatExitClassifierReport(const ExitClassifierReport& report);

}  // namespace mnemo::training

#endif  // MNEMO_ENGINE_TRAINING_EXIT_CLASSIFIER_TRAINER_H_
