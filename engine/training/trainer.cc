#include "engine/training/trainer.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/optim/adamw.h>
#include <torch/serialize.h>

#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/model/model.h"
#include "engine/model/transformer.h"
#include "engine/training/document_batcher.h"
#include "engine/training/progress.h"
#include "engine/util/files.h"
#include "engine/util/status_macros.h"

namespace mnemo::training {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr double kLn2 = 0.69314718055994530942;

// Mean next-token cross entropy over targets != -1. logits [B, S, V], targets [B, S].
torch::Tensor CrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets) {
  torch::Tensor logp = torch::log_softmax(logits, -1);
  return torch::nll_loss(logp.reshape({-1, logp.size(-1)}), targets.reshape({-1}), {},
                         at::Reduction::Mean, /*ignore_index=*/-1);
}

// Scales all gradients so their global L2 norm is at most max_norm.
void ClipGradients(const std::vector<torch::Tensor>& parameters, double max_norm) {
  torch::NoGradGuard no_grad;
  double total = 0;
  for (const torch::Tensor& p : parameters) {
    if (p.grad().defined()) total += p.grad().pow(2).sum().item<double>();
  }
  const double norm = std::sqrt(total);
  if (norm <= max_norm) return;
  for (const torch::Tensor& p : parameters) {
    if (p.grad().defined()) p.grad().mul_(max_norm / (norm + 1e-6));
  }
}

// Linear warm-up, then cosine decay to lr * min_lr_ratio. A run bounded by --max_minutes decays
// over whichever ends first, its steps or its minutes (`minutes` = training time so far), so a
// time-bounded run still ends at the low rate.
double LearningRate(const TrainerOptions& o, int step, double minutes) {
  if (step < o.warmup_steps) return o.lr * (step + 1) / o.warmup_steps;
  double progress =
      std::min(1.0, static_cast<double>(step - o.warmup_steps) / std::max(1, o.steps - o.warmup_steps));
  if (o.max_minutes > 0) progress = std::max(progress, std::min(1.0, minutes / o.max_minutes));
  return o.lr * (o.min_lr_ratio + (1 - o.min_lr_ratio) * 0.5 * (1 + std::cos(M_PI * progress)));
}

// Bits per byte of the first `max_bytes` of each file, each scored from an empty memory with
// every memory kind on, exactly as the server's Score scores a new session.
absl::StatusOr<double> ValidationBpb(model::TransformerImpl& net, const std::vector<corpus::CorpusFile>& files,
                                     int max_files, int64_t max_bytes, const torch::Device& device) {
  torch::NoGradGuard no_grad;
  const bool was_training = net.is_training();
  net.eval();
  double nats = 0;
  int64_t bytes = 0;
  const int seg_len = net.config().seg_len;
  for (int f = 0; f < std::min<int>(max_files, files.size()); ++f) {
    MNEMO_ASSIGN_OR_RETURN(std::string text, util::ReadFile(files[f].path));
    if (static_cast<int64_t>(text.size()) > max_bytes) text.resize(max_bytes);
    std::vector<int64_t> tokens = {model::kBosId};
    for (unsigned char c : text) tokens.push_back(c);
    memory::SessionMemory memory = net.NewMemory(1, device);
    torch::Tensor all = torch::tensor(tokens, torch::kInt64).to(device);
    for (size_t start = 0; start + 1 < tokens.size(); start += seg_len) {
      const int64_t n = std::min<int64_t>(seg_len, tokens.size() - 1 - start);
      torch::Tensor input = all.narrow(0, start, n).view({1, n});
      torch::Tensor target = all.narrow(0, start + 1, n);
      torch::Tensor logp = torch::log_softmax(net.Logits(net.forward(input, memory))[0], -1);
      nats -= logp.gather(1, target.view({n, 1})).sum().item<double>();
      bytes += n;
    }
  }
  if (was_training) net.train();
  return bytes == 0 ? 0.0 : nats / kLn2 / bytes;
}

struct TrainingState {
  int step = 0;
  int64_t tokens = 0;
  double seconds = 0;
  double last_validation_bpb = NAN;
  std::vector<std::pair<int, double>> validation_history;
};

absl::Status SaveCheckpoint(const fs::path& dir, const model::ModelConfig& config,
                            model::TransformerImpl& net, torch::optim::AdamW& optimizer,
                            const TrainingState& state) {
  MNEMO_RETURN_IF_ERROR(model::SaveModelDirectory(dir.string(), config, net));
  torch::save(optimizer, (dir / "optimizer.pt").string());
  json history = json::array();
  for (const auto& [step, bpb] : state.validation_history) history.push_back({step, bpb});
  std::ofstream(dir / "state.json") << json{{"step", state.step},
                                            {"tokens", state.tokens},
                                            {"seconds", state.seconds},
                                            {"validation_history", history}}
                                           .dump(2);
  return absl::OkStatus();
}

absl::Status LoadCheckpoint(const fs::path& dir, model::TransformerImpl& net,
                            torch::optim::AdamW& optimizer, TrainingState& state) {
  MNEMO_RETURN_IF_ERROR(model::LoadWeights(dir.string(), net));
  torch::load(optimizer, (dir / "optimizer.pt").string());
  MNEMO_ASSIGN_OR_RETURN(std::string text, util::ReadFile((dir / "state.json").string()));
  json j = json::parse(text);
  state.step = j.at("step");
  state.tokens = j.at("tokens");
  state.seconds = j.at("seconds");
  for (const auto& entry : j.at("validation_history")) {
    state.validation_history.emplace_back(entry[0].get<int>(), entry[1].get<double>());
  }
  if (!state.validation_history.empty()) state.last_validation_bpb = state.validation_history.back().second;
  return absl::OkStatus();
}

absl::Status WriteCard(const TrainerOptions& o, const corpus::Corpus& corpus, const TrainingState& state,
                       int64_t parameters, const fs::path& out) {
  json split = {{"root", corpus.root}, {"validation", json::array()}, {"train_files", corpus.train.size()}};
  for (const corpus::CorpusFile& f : corpus.validation) split["validation"].push_back(f.path);
  std::ofstream(out / "split.json") << split.dump(2);
  json history = json::array();
  for (const auto& [step, bpb] : state.validation_history) history.push_back({{"step", step}, {"bpb", bpb}});
  json card = {{"command", o.command_line},
               {"corpus", corpus.root},
               {"train_files", corpus.train.size()},
               {"train_bytes", corpus.train_bytes()},
               {"validation_files", corpus.validation.size()},
               {"validation_bytes", corpus.validation_bytes()},
               {"steps", state.step},
               {"tokens", state.tokens},
               {"seconds", state.seconds},
               {"tokens_per_second", state.seconds > 0 ? state.tokens / state.seconds : 0},
               {"parameters", parameters},
               {"batch", o.batch},
               {"seg_len", o.model.seg_len},
               {"lr", o.lr},
               {"calm", o.calm},
               {"seed", o.seed},
               {"init_from", o.init_from},
               {"threads", at::get_num_threads()},
               {"device", o.device},
               {"validation", history}};
  std::ofstream(out / "training_card.json") << card.dump(2);
  std::printf(
      "\nTraining card\n  command:    %s\n  data:       %s (%zu train files, %.1f MB; %zu held out, %.1f MB)\n"
      "  model:      %lld parameters, %d layers, d_model %d\n  steps:      %d x batch %d x seg %d\n"
      "  tokens:     %lld (%.0f tokens/s)\n  time:       %s on %d threads (%s)\n"
      "  validation: %.4f bits/byte\n",
      o.command_line.c_str(), corpus.root.c_str(), corpus.train.size(), corpus.train_bytes() / 1e6,
      corpus.validation.size(), corpus.validation_bytes() / 1e6, static_cast<long long>(parameters),
      o.model.n_layers, o.model.d_model, state.step, o.batch, o.model.seg_len,
      static_cast<long long>(state.tokens), state.seconds > 0 ? state.tokens / state.seconds : 0.0,
      Progress::FormatDuration(state.seconds).c_str(), at::get_num_threads(), o.device.c_str(),
      state.last_validation_bpb);
  return absl::OkStatus();
}

absl::Status TrainImpl(const TrainerOptions& o) {
  at::set_num_threads(o.threads > 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency()));
  torch::manual_seed(o.seed);
  const torch::Device device(o.device);
  MNEMO_RETURN_IF_ERROR(model::ValidateModelConfig(o.model));
  if (o.model.cmem_len > 0 && o.model.seg_len % o.model.cmem_rate != 0) {
    return absl::InvalidArgumentError("seg_len must be a multiple of cmem_rate for training");
  }

  MNEMO_ASSIGN_OR_RETURN(corpus::Corpus corpus, corpus::Corpus::Scan(o.corpus_dir, o.corpus));
  std::fprintf(stderr, "corpus %s: %zu training files (%.1f MB), %zu validation files (%.1f MB)\n",
               corpus.root.c_str(), corpus.train.size(), corpus.train_bytes() / 1e6,
               corpus.validation.size(), corpus.validation_bytes() / 1e6);

  model::Transformer net(o.model);
  net->InitializeWeights(o.seed);
  const bool resuming = o.resume && fs::exists(fs::path(o.out_dir) / "checkpoint" / "state.json");
  if (!o.init_from.empty() && !resuming) {
    MNEMO_RETURN_IF_ERROR(model::LoadWeights(o.init_from, *net));
    std::fprintf(stderr, "starting from the weights of %s\n", o.init_from.c_str());
  }
  net->to(device);
  net->train();
  int64_t parameters = 0;
  std::vector<torch::Tensor> decay, no_decay;
  for (const torch::Tensor& p : net->parameters()) {
    parameters += p.numel();
    (p.dim() >= 2 ? decay : no_decay).push_back(p);
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                 torch::optim::AdamWOptions(o.lr).weight_decay(o.weight_decay)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                    torch::optim::AdamWOptions(o.lr).weight_decay(0)));
  torch::optim::AdamW optimizer(std::move(groups));

  const fs::path out(o.out_dir), checkpoint = out / "checkpoint";
  TrainingState state;
  if (resuming) {
    MNEMO_RETURN_IF_ERROR(LoadCheckpoint(checkpoint, *net, optimizer, state));
    std::fprintf(stderr, "resumed from %s at step %d (%lld tokens)\n", checkpoint.c_str(), state.step,
                 static_cast<long long>(state.tokens));
  }
  std::fprintf(stderr, "model: %lld parameters; %d threads; device %s\n",
               static_cast<long long>(parameters), at::get_num_threads(), o.device.c_str());

  // A resumed run reshuffles with a step-dependent seed: every row starts a fresh document.
  DocumentBatcher batcher(corpus.train, o.batch, o.model.seg_len, o.seed + 7919 * state.step);
  memory::SessionMemory memory = net->NewMemory(o.batch, device);
  Progress progress("train");
  const double start_seconds = state.seconds;
  double smoothed_bpb = NAN;
  constexpr size_t kRateWindow = 20;                  // steps the displayed tok/s spans
  std::deque<std::pair<double, int64_t>> recent;   // (seconds, tokens) after each step

  auto validate = [&]() -> absl::Status {
    MNEMO_ASSIGN_OR_RETURN(double bpb, ValidationBpb(*net, corpus.validation, o.eval_files, o.eval_bytes, device));
    state.last_validation_bpb = bpb;
    state.validation_history.emplace_back(state.step, bpb);
    return absl::OkStatus();
  };

  while (state.step < o.steps) {
    const double minutes = (start_seconds + progress.elapsed_seconds()) / 60;
    if (o.max_minutes > 0 && minutes >= o.max_minutes) {
      std::fprintf(stderr, "\nstopping at the %.0f-minute limit\n", o.max_minutes);
      break;
    }
    MNEMO_ASSIGN_OR_RETURN(Batch batch, batcher.Next());
    for (int row : batch.new_document) memory.ResetRow(row);
    for (auto& group : optimizer.param_groups()) {
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(LearningRate(o, state.step, minutes));
    }
    std::vector<torch::Tensor> layers;
    torch::Tensor inputs = batch.inputs.to(device), targets = batch.targets.to(device);
    net->forward(inputs, memory, &layers);
    torch::Tensor last_loss = CrossEntropy(net->Logits(layers.back()), targets);
    torch::Tensor loss = last_loss;
    if (o.calm && layers.size() > 1) {
      const double total_weight = layers.size() * (layers.size() + 1) / 2.0;
      loss = last_loss * (layers.size() / total_weight);
      for (size_t i = 0; i + 1 < layers.size(); ++i) {
        loss = loss + CrossEntropy(net->Logits(layers[i]), targets) * ((i + 1) / total_weight);
      }
    }
    torch::Tensor reconstruction = net->TakeReconstructionLoss();
    if (reconstruction.defined()) loss = loss + reconstruction * o.reconstruction_weight;
    optimizer.zero_grad();
    loss.backward();
    ClipGradients(net->parameters(), o.grad_clip);
    optimizer.step();
    memory.Detach();

    ++state.step;
    state.tokens += batch.tokens;
    state.seconds = start_seconds + progress.elapsed_seconds();
    const double bpb = last_loss.item<double>() / kLn2;
    smoothed_bpb = std::isnan(smoothed_bpb) ? bpb : 0.98 * smoothed_bpb + 0.02 * bpb;
    if (o.eval_every > 0 && state.step % o.eval_every == 0) MNEMO_RETURN_IF_ERROR(validate());
    if (o.checkpoint_every > 0 && state.step % o.checkpoint_every == 0) {
      MNEMO_RETURN_IF_ERROR(SaveCheckpoint(checkpoint, o.model, *net, optimizer, state));
    }
    double fraction = static_cast<double>(state.step) / o.steps;
    if (o.max_minutes > 0) fraction = std::max(fraction, state.seconds / 60 / o.max_minutes);
    // The rate over the last steps: a cumulative average hides a run that slows down.
    recent.emplace_back(state.seconds, state.tokens);
    if (recent.size() > kRateWindow) recent.pop_front();
    const double window_seconds = recent.back().first - recent.front().first;
    const double rate = window_seconds > 0
                            ? (recent.back().second - recent.front().second) / window_seconds
                            : 0.0;
    progress.Update(fraction, absl::StrFormat("step %d/%d | %.0f tok/s | train %.3f bpb | val %.3f bpb | epoch %d",
                                              state.step, o.steps, rate, smoothed_bpb,
                                              state.last_validation_bpb, batcher.epoch()));
  }
  // The last step may have just been validated (steps a multiple of eval_every).
  if (state.validation_history.empty() || state.validation_history.back().first != state.step) {
    MNEMO_RETURN_IF_ERROR(validate());
  }
  progress.Finish(absl::StrFormat("%d steps, validation %.4f bpb", state.step, state.last_validation_bpb));
  MNEMO_RETURN_IF_ERROR(SaveCheckpoint(checkpoint, o.model, *net, optimizer, state));
  MNEMO_RETURN_IF_ERROR(model::SaveModelDirectory(o.out_dir, o.model, *net, o.save_bf16));
  return WriteCard(o, corpus, state, parameters, out);
}

}  // namespace

absl::Status Train(const TrainerOptions& options) {
  try {
    return TrainImpl(options);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("training failed: ", e.what_without_backtrace()));
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat("bad checkpoint state: ", e.what()));
  }
}

}  // namespace mnemo::training
