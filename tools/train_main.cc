// mnemo-train: trains a native mnemo model on a directory of text files, or the CALM exit
// classifier of a trained one (the model frozen).
//
//   mnemo-train --corpus /usr/lib/python3.11 --out models/NAME [--steps N --max_minutes M
//               --layers 6 --d_model 256 ... --resume]
//   mnemo-train --exit_classifier --model models/NAME [--exit_classifier_fit_files 160 ...]
//
// Flags and main only; the work is in engine/training.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/training/exit_classifier_trainer.h"
#include "engine/training/trainer.h"
#include "engine/util/cpu_backend.h"

constexpr char kDefaultCorpus[] = "/usr/lib/python3.11";

ABSL_FLAG(std::string, corpus, kDefaultCorpus,
          "directory of text files to train on (with --exit_classifier: default = the model's "
          "split.json root)");
ABSL_FLAG(std::string, extensions, ".py", "comma-separated file extensions to use (empty = all text)");
ABSL_FLAG(double, validation_fraction, 0.08, "fraction of files held out (by path hash)");
ABSL_FLAG(std::string, out, "", "output model directory (checkpoints go to OUT/checkpoint)");
ABSL_FLAG(std::string, name, "mnemo", "model name written to config.json");
ABSL_FLAG(std::string, device, "cpu", "cpu or cuda");
ABSL_FLAG(int, threads, 0, "intra-op threads (0 = all cores)");
ABSL_FLAG(int, layers, 6, "decoder layers");
ABSL_FLAG(int, d_model, 256, "model width");
ABSL_FLAG(int, heads, 4, "attention heads");
ABSL_FLAG(int, d_ff, 0, "feed-forward width (0 = 4 * d_model)");
ABSL_FLAG(int, seg_len, 256, "segment length (positions per step per row)");
ABSL_FLAG(int, mem_len, 256, "raw (XL) memory length");
ABSL_FLAG(int, cmem_len, 128, "compressed memory slots (0 = off)");
ABSL_FLAG(int, cmem_rate, 4, "positions per compressed slot");
ABSL_FLAG(std::string, compression, "conv", "mean, max or conv");
ABSL_FLAG(int, clamp_len, 1024, "largest relative distance with its own embedding");
ABSL_FLAG(int, knn_layer, -3,
          "kNN layer: 0-based, or negative from the top (-1 = last, -3 = 3rd from last); "
          "--knn_mem_len 0 turns the kNN layer off");
ABSL_FLAG(int, knn_topk, 32, "kNN neighbours per query");
ABSL_FLAG(int, knn_mem_len, 2048, "kNN memory (positions) during training; 0 = no kNN layer");
ABSL_FLAG(bool, calm, true, "CALM loss at every layer (w_i proportional to i)");
ABSL_FLAG(int, batch, 8, "rows (documents streamed in parallel)");
ABSL_FLAG(int, steps, 5000, "optimizer steps");
ABSL_FLAG(double, max_minutes, 0, "stop after this many minutes of training (0 = no limit)");
ABSL_FLAG(double, lr, 1e-3, "peak learning rate");
ABSL_FLAG(int, warmup_steps, 200, "linear warm-up steps");
ABSL_FLAG(int, eval_every, 500, "steps between validation runs");
ABSL_FLAG(int, eval_files, 8, "validation files per run");
ABSL_FLAG(int64_t, eval_bytes, 32768, "bytes scored per validation file");
ABSL_FLAG(int, checkpoint_every, 500, "steps between checkpoints");
ABSL_FLAG(bool, resume, false, "continue from OUT/checkpoint if present");
ABSL_FLAG(std::string, init_from, "",
          "start from this model directory's weights (same shape flags; fine-tuning)");
ABSL_FLAG(bool, bf16, true, "store the final weights in bfloat16");
ABSL_FLAG(uint64_t, seed, 1, "random seed (initialisation and data order)");

ABSL_FLAG(bool, exit_classifier, false,
          "train the CALM exit classifier of the trained model --model (frozen) on its training "
          "files, writing MODEL/exit_classifier.safetensors (or into --out)");
ABSL_FLAG(std::string, model, "", "with --exit_classifier: the trained model directory");
ABSL_FLAG(int, exit_classifier_fit_files, 160, "texts (one per training file) to fit on");
ABSL_FLAG(int, exit_classifier_holdout_files, 40,
          "texts (training files the fit never sees) to report accuracy and AUC on");
ABSL_FLAG(int64_t, exit_classifier_bytes, 2048, "bytes from the start of each file");
ABSL_FLAG(double, exit_classifier_keep, 0.5, "share of each fit text's positions used");
ABSL_FLAG(int, exit_classifier_epochs, 40, "passes over the fit examples");
ABSL_FLAG(double, exit_classifier_lr, 3e-3, "Adam learning rate of the classifier");

namespace {

int TrainExitClassifier(const std::vector<std::string>& args) {
  mnemo::training::ExitClassifierTrainerOptions o;
  o.command_line = absl::StrJoin(args, " ");
  o.model_dir = absl::GetFlag(FLAGS_model);
  if (o.model_dir.empty()) {
    std::fprintf(stderr, "mnemo-train: --exit_classifier needs --model DIR\n");
    return 2;
  }
  // The model's split.json names its corpus; --corpus only when set to another directory.
  if (absl::GetFlag(FLAGS_corpus) != kDefaultCorpus) o.corpus_dir = absl::GetFlag(FLAGS_corpus);
  o.extensions.clear();
  for (absl::string_view ext :
       absl::StrSplit(absl::GetFlag(FLAGS_extensions), ',', absl::SkipEmpty())) {
    o.extensions.emplace_back(ext);
  }
  o.fit_files = absl::GetFlag(FLAGS_exit_classifier_fit_files);
  o.holdout_files = absl::GetFlag(FLAGS_exit_classifier_holdout_files);
  o.bytes_per_file = absl::GetFlag(FLAGS_exit_classifier_bytes);
  o.keep = absl::GetFlag(FLAGS_exit_classifier_keep);
  o.fit.epochs = absl::GetFlag(FLAGS_exit_classifier_epochs);
  o.fit.lr = absl::GetFlag(FLAGS_exit_classifier_lr);
  o.threads = absl::GetFlag(FLAGS_threads);
  o.seed = absl::GetFlag(FLAGS_seed);
  if (!absl::GetFlag(FLAGS_out).empty()) {
    o.out_path = absl::GetFlag(FLAGS_out) + "/" + mnemo::model::kExitClassifierFile;
  }
  if (o.fit_files <= 0 || o.holdout_files <= 0 || o.bytes_per_file < 2 || !(o.keep > 0) ||
      o.keep > 1 || o.fit.epochs <= 0 || !(o.fit.lr > 0)) {
    std::fprintf(stderr, "mnemo-train: bad --exit_classifier_* value\n");
    return 2;
  }
  absl::StatusOr<mnemo::training::ExitClassifierReport> report =
      mnemo::training::TrainExitClassifier(o);
  if (!report.ok()) {
    std::fprintf(stderr, "mnemo-train: %s\n", report.status().ToString().c_str());
    return 1;
  }
  std::printf("%s", mnemo::training::FormatExitClassifierReport(*report).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  mnemo::util::ConfigureCpuRuntime(argv, mnemo::util::CpuWorkload::kTraining);
  std::vector<std::string> args(argv, argv + argc);
  absl::SetProgramUsageMessage(
      "mnemo-train --corpus DIR --out DIR [options]\n"
      "mnemo-train --exit_classifier --model DIR [--exit_classifier_* options]");
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_exit_classifier)) return TrainExitClassifier(args);
  if (absl::GetFlag(FLAGS_out).empty()) {
    std::fprintf(stderr, "mnemo-train: --out DIR is required\n");
    return 2;
  }
  mnemo::training::TrainerOptions o;
  o.command_line = absl::StrJoin(args, " ");
  mnemo::model::ModelConfig& c = o.model;
  c.name = absl::GetFlag(FLAGS_name);
  c.n_layers = absl::GetFlag(FLAGS_layers);
  c.d_model = absl::GetFlag(FLAGS_d_model);
  c.n_heads = absl::GetFlag(FLAGS_heads);
  c.d_head = c.n_heads > 0 ? c.d_model / c.n_heads : 0;
  c.d_ff = absl::GetFlag(FLAGS_d_ff) > 0 ? absl::GetFlag(FLAGS_d_ff) : 4 * c.d_model;
  c.seg_len = absl::GetFlag(FLAGS_seg_len);
  c.mem_len = absl::GetFlag(FLAGS_mem_len);
  c.cmem_len = absl::GetFlag(FLAGS_cmem_len);
  c.cmem_rate = absl::GetFlag(FLAGS_cmem_rate);
  c.clamp_len = absl::GetFlag(FLAGS_clamp_len);
  auto compression = mnemo::model::ParseCompression(absl::GetFlag(FLAGS_compression));
  if (!compression.ok()) {
    std::fprintf(stderr, "mnemo-train: %s\n", std::string(compression.status().message()).c_str());
    return 2;
  }
  c.compression = *compression;
  c.knn_mem_len = absl::GetFlag(FLAGS_knn_mem_len);
  const int knn_layer = absl::GetFlag(FLAGS_knn_layer);
  c.knn_layer = c.knn_mem_len == 0 ? -1 : knn_layer >= 0 ? knn_layer : c.n_layers + knn_layer;
  if (c.knn_mem_len > 0 && (c.knn_layer < 0 || c.knn_layer >= c.n_layers)) {
    std::fprintf(stderr, "mnemo-train: --knn_layer %d is outside a %d-layer model\n", knn_layer,
                 c.n_layers);
    return 2;
  }
  c.knn_topk = absl::GetFlag(FLAGS_knn_topk);
  c.exit_heads = absl::GetFlag(FLAGS_calm);

  o.corpus_dir = absl::GetFlag(FLAGS_corpus);
  for (absl::string_view ext : absl::StrSplit(absl::GetFlag(FLAGS_extensions), ',', absl::SkipEmpty())) {
    o.corpus.extensions.emplace_back(ext);
  }
  o.corpus.validation_fraction = absl::GetFlag(FLAGS_validation_fraction);
  o.out_dir = absl::GetFlag(FLAGS_out);
  o.device = absl::GetFlag(FLAGS_device);
  o.threads = absl::GetFlag(FLAGS_threads);
  o.batch = absl::GetFlag(FLAGS_batch);
  o.steps = absl::GetFlag(FLAGS_steps);
  o.max_minutes = absl::GetFlag(FLAGS_max_minutes);
  o.lr = absl::GetFlag(FLAGS_lr);
  o.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  o.calm = absl::GetFlag(FLAGS_calm);
  o.eval_every = absl::GetFlag(FLAGS_eval_every);
  o.eval_files = absl::GetFlag(FLAGS_eval_files);
  o.eval_bytes = absl::GetFlag(FLAGS_eval_bytes);
  o.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  o.resume = absl::GetFlag(FLAGS_resume);
  o.init_from = absl::GetFlag(FLAGS_init_from);
  o.save_bf16 = absl::GetFlag(FLAGS_bf16);
  o.seed = absl::GetFlag(FLAGS_seed);
  if (absl::Status s = mnemo::training::Train(o); !s.ok()) {
    std::fprintf(stderr, "mnemo-train: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
