// mnemo-decode-batch-bench: a decode step for B sessions, one at a time (Model::Forward /
// ForwardWithExit per session, what the scheduler does today) vs. batched
// (model::BatchDecoder), by batch size, attention layout and CALM threshold.
//
//   mnemo-decode-batch-bench [--model models/mnemo-stdlib --batch_sizes 1,4,16,64
//                             --thresholds 2,0.9,0.8 --steps 16 --threads 0]
//
// Sessions are primed with different history lengths (spread over 0..--max_history) from the
// Python sources under --text_dir, then decode the bytes that follow them (teacher forcing, so
// exit rates are those of real text). The memories keep advancing across measurements (a few
// dozen positions each: negligible against the histories). Before timing, one batched step is
// checked against solo steps on cloned memories (max |log-prob difference|). Prints one
// Markdown table. Flags and main only; the work is in engine/model.
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <time.h>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/model/batch_decoder.h"
#include "engine/model/model.h"
#include "engine/model/parallel_decoder.h"
#include "engine/util/cpu_backend.h"
#include "engine/util/worker_pool.h"

ABSL_FLAG(std::string, model, "models/mnemo-stdlib", "model directory");
ABSL_FLAG(std::string, batch_sizes, "1,4,16,64", "sessions per step, comma-separated");
ABSL_FLAG(std::string, kv_dtype, "float32",
          "element type of the sessions' attention rings: float32 or float16");
ABSL_FLAG(std::string, weight_dtype, "float32",
          "the model's weights: float32, float16 or bfloat16 (as mnemo-server)");
ABSL_FLAG(std::string, thresholds, "2,0.9,0.8", "CALM thresholds (> 1 = no early exit)");
ABSL_FLAG(std::string, exit_measure, "softmax",
          "CALM confidence measure the thresholds apply to: softmax, saturation or classifier");
ABSL_FLAG(std::string, layouts, "per_row",
          "batched attention layouts to time: per_row (host kernel on the CPU), per_row_ops "
          "(LibTorch ops per row)");
ABSL_FLAG(std::string, text_dir, "/usr/lib/python3.11", "*.py files the sessions read");
ABSL_FLAG(int, max_history, 2000, "longest primed history (tokens)");
ABSL_FLAG(int, min_history, 0, "shortest primed history (tokens)");
ABSL_FLAG(int, steps, 16, "timed steps per measurement");
ABSL_FLAG(int, warmup, 2, "untimed steps before each measurement");
ABSL_FLAG(bool, solo, true, "also time the one-session-at-a-time loop");
ABSL_FLAG(int, threads, 0, "intra-op threads (0 = all cores)");
ABSL_FLAG(std::string, decode_threads, "1",
          "batched modes: shards per step, comma-separated (1 = BatchDecoder with LibTorch's "
          "intra-op threads; N > 1 = ParallelDecoder, N one-threaded shards)");
ABSL_FLAG(int, min_shard_rows, 4, "ParallelDecoder: fewest rows per shard");

namespace {

using Clock = std::chrono::steady_clock;
using mnemo::model::AttentionLayout;
using mnemo::model::BatchDecoder;
using mnemo::model::DecodeRow;
using mnemo::memory::SessionMemory;

// About `bytes` bytes of Python source, files in name order.
std::vector<int> ReadCorpus(const std::string& dir, size_t bytes) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".py") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<int> text;
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    for (char c; in.get(c) && text.size() < bytes;) text.push_back(static_cast<unsigned char>(c));
    if (text.size() >= bytes) break;
  }
  return text;
}

struct Session {
  SessionMemory memory;
  std::vector<int> text;  // history then what it decodes
  size_t next = 0;        // next token to feed
};

template <typename T>
std::vector<T> ParseList(const std::string& text) {
  std::vector<T> out;
  for (absl::string_view piece : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    double value;
    if (absl::SimpleAtod(piece, &value)) out.push_back(static_cast<T>(value));
  }
  return out;
}

double CpuSeconds() {  // this process, all threads: unaffected by other processes' load
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Timing {
  double ms_per_step = 0;
  double cpu_ms_per_step = 0;
  double mean_exit = 0;
};

// `steps` decode steps over sessions[0..batch), solo or batched.
using StepFn = std::function<absl::StatusOr<mnemo::model::DecodeBatchResult>(
    absl::Span<const DecodeRow>)>;

Timing Run(mnemo::model::Model& model, const StepFn* decoder, std::vector<Session>& sessions,
           int batch, float threshold, mnemo::model::ExitMeasure measure, int warmup, int steps) {
  Timing timing;
  int64_t exits = 0, tokens = 0;
  Clock::time_point start;
  double cpu_start = 0;
  for (int step = -warmup; step < steps; ++step) {
    if (step == 0) {
      start = Clock::now();
      cpu_start = CpuSeconds();
    }
    std::vector<int> layers;
    if (decoder != nullptr) {
      std::vector<DecodeRow> rows;
      for (int r = 0; r < batch; ++r) {
        Session& s = sessions[r];
        rows.push_back(
            DecodeRow{s.text[s.next++ % s.text.size()], &s.memory, threshold, false, measure});
      }
      auto out = (*decoder)(rows);
      if (!out.ok()) {
        std::fprintf(stderr, "step failed: %s\n", out.status().ToString().c_str());
        std::exit(1);
      }
      layers = out->exit_layers;
    } else {
      for (int r = 0; r < batch; ++r) {
        Session& s = sessions[r];
        const int token = s.text[s.next++ % s.text.size()];
        if (threshold > 1.0f) {
          if (!model.Forward({token}, s.memory, mnemo::model::Outputs::kLast).ok()) std::exit(1);
          layers.push_back(model.config().n_layers);
        } else {
          auto out = model.ForwardWithExit({token}, s.memory, threshold, measure);
          if (!out.ok()) std::exit(1);
          layers.push_back(out->exit_layers[0]);
        }
      }
    }
    if (step >= 0) {
      for (int layer : layers) exits += layer;
      tokens += static_cast<int64_t>(layers.size());
    }
  }
  timing.ms_per_step = std::chrono::duration<double, std::milli>(Clock::now() - start).count() / steps;
  timing.cpu_ms_per_step = (CpuSeconds() - cpu_start) * 1000.0 / steps;
  timing.mean_exit = static_cast<double>(exits) / std::max<int64_t>(tokens, 1);
  return timing;
}

}  // namespace

int main(int argc, char** argv) {
  mnemo::util::ConfigureCpuRuntime(argv);
  absl::SetProgramUsageMessage("batched vs one-at-a-time decode steps on a model");
  absl::ParseCommandLine(argc, argv);
  const int threads = absl::GetFlag(FLAGS_threads);
  at::set_num_threads(threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency()));

  const absl::StatusOr<torch::ScalarType> weight_dtype =
      mnemo::model::ParseWeightDtype(absl::GetFlag(FLAGS_weight_dtype));
  if (!weight_dtype.ok()) {
    std::fprintf(stderr, "--weight_dtype: %s\n", weight_dtype.status().ToString().c_str());
    return 2;
  }
  mnemo::model::LoadOptions load;
  load.weight_dtype = *weight_dtype;
  auto model = mnemo::model::Model::Load(absl::GetFlag(FLAGS_model), load);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  std::vector<int> batch_sizes = ParseList<int>(absl::GetFlag(FLAGS_batch_sizes));
  std::vector<float> thresholds = ParseList<float>(absl::GetFlag(FLAGS_thresholds));
  absl::StatusOr<mnemo::model::ExitMeasure> parsed_measure =
      mnemo::model::ParseExitMeasure(absl::GetFlag(FLAGS_exit_measure));
  if (!parsed_measure.ok()) {
    std::fprintf(stderr, "--exit_measure: %s\n", parsed_measure.status().ToString().c_str());
    return 2;
  }
  const mnemo::model::ExitMeasure measure = *parsed_measure;
  const absl::StatusOr<bool> half_rings = mnemo::model::ParseKvDtype(absl::GetFlag(FLAGS_kv_dtype));
  if (!half_rings.ok()) {
    std::fprintf(stderr, "--kv_dtype: %s\n", half_rings.status().ToString().c_str());
    return 2;
  }
  mnemo::model::MemoryOptions memory_options;
  memory_options.half_rings = *half_rings;
  if (absl::Status s = (*model)->CheckExitMeasure(measure); !s.ok()) {
    std::fprintf(stderr, "--exit_measure: %s\n", s.ToString().c_str());
    return 2;
  }
  const int max_batch = *std::max_element(batch_sizes.begin(), batch_sizes.end());
  const int max_history = absl::GetFlag(FLAGS_max_history);
  const int min_history = std::min(absl::GetFlag(FLAGS_min_history), max_history);
  const int steps = absl::GetFlag(FLAGS_steps), warmup = absl::GetFlag(FLAGS_warmup);

  // Session i reads its own stretch of the corpus; histories spread over 0..max_history.
  const size_t stretch = max_history + 4096;
  std::vector<int> corpus = ReadCorpus(absl::GetFlag(FLAGS_text_dir), stretch * max_batch);
  std::vector<Session> sessions(max_batch);
  int64_t total_history = 0;
  const Clock::time_point prime_start = Clock::now();
  for (int i = 0; i < max_batch; ++i) {
    Session& s = sessions[i];
    const size_t from = (i * stretch) % std::max<size_t>(corpus.size() - stretch, 1);
    s.text.assign(corpus.begin() + from, corpus.begin() + std::min(corpus.size(), from + stretch));
    const int history =
        min_history + (i * 619 + 1000) % (std::max(max_history - min_history, 0) + 1);
    s.memory = (*model)->NewMemory(memory_options);
    if (history > 0) {
      if (!(*model)->Forward(absl::MakeConstSpan(s.text).subspan(0, history), s.memory).ok()) return 1;
    }
    s.next = history;
    total_history += history;
  }
  std::printf("model %s, threads %d, %d sessions primed (mean history %.0f tokens) in %.1f s\n",
              absl::GetFlag(FLAGS_model).c_str(), at::get_num_threads(), max_batch,
              static_cast<double>(total_history) / max_batch,
              std::chrono::duration<double>(Clock::now() - prime_start).count());

  std::vector<std::pair<std::string, AttentionLayout>> layouts;
  for (absl::string_view name : absl::StrSplit(absl::GetFlag(FLAGS_layouts), ',', absl::SkipEmpty())) {
    if (name != "per_row" && name != "per_row_ops") {
      std::fprintf(stderr, "--layouts: per_row or per_row_ops, got '%s'\n",
                   std::string(name).c_str());
      return 2;
    }
    layouts.emplace_back(std::string(name), name == "per_row_ops" ? AttentionLayout::kPerRowOps
                                                                  : AttentionLayout::kPerRow);
  }

  {  // Check: one batched step against solo steps, on clones.
    const int b = std::min(max_batch, 16);
    for (const auto& [name, layout] : layouts) {
      std::vector<SessionMemory> batched, solo;
      batched.reserve(b);
      solo.reserve(b);
      std::vector<DecodeRow> rows;
      for (int r = 0; r < b; ++r) {
        batched.push_back(sessions[r].memory.Clone());
        solo.push_back(sessions[r].memory.Clone());
        rows.push_back(DecodeRow{sessions[r].text[sessions[r].next], &batched.back(), 2.0f});
      }
      BatchDecoder decoder(**model, {layout});
      auto out = decoder.Step(rows);
      float worst = 0;
      for (int r = 0; r < b && out.ok(); ++r) {
        auto one = (*model)->Forward({rows[r].token}, solo[r], mnemo::model::Outputs::kLast);
        worst = std::max(worst, (out->logprobs[r] - (*one)[0]).abs().max().item<float>());
      }
      std::printf("check (%s, B=%d): max |batched - solo| log-prob = %.2e\n", name.c_str(), b, worst);
    }
  }

  // Wall time suffers from whatever else runs on the machine; CPU time (this process) much less,
  // so both are shown, and the speed-ups are by CPU time when --threads=1.
  std::printf("\n| B | threshold | mode | wall ms/step | CPU ms/step | tokens/s (wall) | tokens/s (CPU) | x solo B=1 (CPU) | mean exit layer |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (float threshold : thresholds) {
    double base_tps = 0;
    for (int batch : batch_sizes) {
      std::vector<std::pair<std::string, Timing>> rows;
      if (absl::GetFlag(FLAGS_solo)) {
        rows.emplace_back("solo loop", Run(**model, nullptr, sessions, batch, threshold, measure, warmup, steps));
      }
      for (const auto& [name, layout] : layouts) {
       for (int shards : ParseList<int>(absl::GetFlag(FLAGS_decode_threads))) {
        if (shards > 1) {
          mnemo::model::ParallelDecoderOptions options;
          options.decoder.layout = layout;
          options.threads = shards;
          options.min_shard_rows = absl::GetFlag(FLAGS_min_shard_rows);
          mnemo::util::WorkerPool workers(shards - 1);
          mnemo::model::ParallelDecoder parallel(**model, options, workers);
          const StepFn step = [&](absl::Span<const DecodeRow> r) { return parallel.Step(r); };
          rows.emplace_back(absl::StrCat("batched ", name, " x", shards),
                            Run(**model, &step, sessions, batch, threshold, measure, warmup, steps));
          continue;
        }
        BatchDecoder decoder(**model, {layout});
        const StepFn step = [&](absl::Span<const DecodeRow> r) { return decoder.Step(r); };
        rows.emplace_back("batched " + name,
                          Run(**model, &step, sessions, batch, threshold, measure, warmup, steps));
       }
      }
      for (const auto& [mode, t] : rows) {
        const double tps = batch * 1000.0 / t.ms_per_step;
        const double cpu_tps = batch * 1000.0 / t.cpu_ms_per_step;
        if (base_tps == 0) base_tps = cpu_tps;
        std::printf("| %d | %s | %s | %.2f | %.2f | %.0f | %.0f | %.2f | %.2f |\n", batch,
                    threshold > 1 ? "none" : std::to_string(threshold).substr(0, 4).c_str(),
                    mode.c_str(), t.ms_per_step, t.cpu_ms_per_step, tps, cpu_tps,
                    cpu_tps / base_tps, t.mean_exit);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
