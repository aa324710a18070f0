// Trainer: trains a native mnemo model with the same blocks the server runs (docs/design.md §2).
//
// Transformer-XL training: each row streams its documents in order, one segment per step,
// memory detached between segments and reset between documents. Losses: next-byte cross
// entropy, at every layer through the shared exit head when CALM is on (weights w_i ∝ i),
// plus the compression nets' attention-reconstruction loss. Owns the model and optimizer;
// not thread-safe.
#ifndef MNEMO_ENGINE_TRAINING_TRAINER_H_
#define MNEMO_ENGINE_TRAINING_TRAINER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/model/model_config.h"
#include "engine/corpus/corpus.h"

namespace mnemo::training {

struct TrainerOptions {
  model::ModelConfig model;
  std::string corpus_dir;
  corpus::CorpusOptions corpus;
  std::string out_dir;
  std::string device = "cpu";
  int threads = 0;             // 0 = all cores
  int batch = 8;
  int steps = 5000;            // optimizer steps (one segment per row each)
  double max_minutes = 0;      // stop early after this much training time; 0 = no limit
  double lr = 1e-3;
  int warmup_steps = 200;
  double min_lr_ratio = 0.1;   // cosine decay ends at lr * min_lr_ratio
  double weight_decay = 0.01;
  double grad_clip = 1.0;
  bool calm = true;            // loss at every layer (w_i ∝ i); else the last layer only
  double reconstruction_weight = 1.0;
  int eval_every = 500;        // steps between validation runs; 0 = only at the end
  int eval_files = 8;          // validation files per run
  int64_t eval_bytes = 32768;  // bytes scored per validation file
  int checkpoint_every = 500;
  bool resume = false;
  std::string init_from;       // a model directory of the same shape to start from (fine-tuning)
  bool save_bf16 = true;       // final weights in bfloat16 (half the size)
  uint64_t seed = 1;
  std::string command_line;    // recorded in the training card
};

// Trains, writes checkpoints to out_dir/checkpoint, and the final model (config.json,
// model.safetensors, split.json, training_card.json) to out_dir.
absl::Status Train(const TrainerOptions& options);

}  // namespace mnemo::training

#endif  // MNEMO_ENGINE_TRAINING_TRAINER_H_
