// mnemo-eval: bits per byte of a model on held-out long files, per memory mode (issue 3).
//
//   mnemo-eval --model DIR [--data DIR_OR_LIST | --data_list FILE] [--min_bytes 32768]
//              [--max_files N] [--max_bytes_per_file N] [--out docs/results] [--threads N]
//              [--modes none,xl,cmem,knn,exit] [--knn_sizes 4096,16384,65536]
//              [--exit_thresholds 0.9,0.8,...] [--exit_knn_mem_len N]
//              [--passkey --passkey_seeds 20 (or 20,20,5: one per distance)
//              --passkey_distances 8192,32768,131072]
//              [--datastore DIR --knn_lm_k 16 --knn_lm_nprobe 32 --knn_lm_lambda 0,0.1,...
//               --knn_lm_temperature 1,10,... --knn_lm_latency_queries 256]
//
// Without --data/--data_list it scores the validation files of DIR/split.json (the trainer's).
// Writes OUT/eval.md, OUT/eval.json, OUT/eval_memory.png and OUT/eval_exit.png; progress on
// stderr. With --datastore it also runs the kNN-LM sweep (issue 4): one full-memory forward
// pass and one datastore search per file, every (λ, T) pair scored on the same hits, λ and T
// chosen on the validation half of the files and reported on the test half; it writes
// OUT/knn_lm_eval.md and OUT/knn_lm_eval.json (eval.md/json only when a memory, exit or
// passkey pass ran, so `--modes ''` runs the sweep alone without touching eval.md).
// All logic lives in engine/eval (libraries mnemo_eval, mnemo_eval_knn_lm); this file is flags
// and wiring.
#include <ATen/Parallel.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
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
#include "engine/corpus/data_files.h"
#include "engine/eval/corpus.h"
#include "engine/datastore/datastore.h"
#include "engine/datastore/model_id.h"
#include "engine/eval/evaluator.h"
#include "engine/eval/knn_lm_report.h"
#include "engine/eval/knn_lm_scorer.h"
#include "engine/eval/knn_lm_sweep.h"
#include "engine/eval/plot.h"
#include "engine/eval/progress.h"
#include "engine/eval/report.h"
#include "engine/model/model.h"
#include "engine/util/cpu_backend.h"

ABSL_FLAG(std::string, model, "", "model directory (config.json + model.safetensors)");
ABSL_FLAG(std::string, data, "",
          "held-out data: a directory of text files, a list file (one path per line) or a "
          "split.json; default MODEL/split.json");
ABSL_FLAG(std::string, data_list, "", "file listing held-out files, one path per line");
ABSL_FLAG(int64_t, min_bytes, 32768, "skip files smaller than this");
ABSL_FLAG(int, max_files, 0, "score at most this many files (0 = all)");
ABSL_FLAG(int64_t, max_bytes_per_file, 0, "score only the first N bytes of each file (0 = all)");
ABSL_FLAG(std::string, out, "docs/results", "output directory for eval.md/json and plots");
ABSL_FLAG(int, threads, 0, "LibTorch intra-op threads (0 = LibTorch's default)");
ABSL_FLAG(int, chunk, 4096, "tokens per Forward call");
ABSL_FLAG(std::string, modes, "none,xl,cmem,knn,exit",
          "passes to run: none (no memory), xl, cmem, knn (every --knn_sizes), exit");
ABSL_FLAG(std::string, knn_sizes, "4096,16384,65536", "kNN memory sizes (entries) to evaluate");
ABSL_FLAG(std::string, exit_thresholds, "0.9,0.8,0.7,0.6,0.5,0.4",
          "early-exit thresholds (a full-depth row is always added)");
ABSL_FLAG(int, exit_knn_mem_len, 0,
          "kNN entries for the early-exit passes (0 = the model's knn_mem_len)");
ABSL_FLAG(bool, passkey, false, "run the passkey retrieval test");
ABSL_FLAG(std::string, kv_dtype, "float32",
          "element type of the memory modes' attention rings: float32, or float16 (as "
          "mnemo-server --kv_dtype float16)");
ABSL_FLAG(std::string, weight_dtype, "float32",
          "the model's weights: float32, float16 or bfloat16 (as mnemo-server --weight_dtype)");
ABSL_FLAG(std::string, passkey_seeds, "20",
          "passkey trials per distance and setting: one count, or one per distance");
ABSL_FLAG(std::string, passkey_distances, "8192,32768,131072", "passkey filler bytes");
ABSL_FLAG(std::string, datastore, "",
          "kNN-LM datastore directory (mnemo-index): run the (lambda, T) sweep on it");
ABSL_FLAG(int, knn_lm_k, 16, "kNN-LM neighbours per byte");
ABSL_FLAG(int, knn_lm_nprobe, 32, "IVF lists visited per kNN-LM search (IVF-PQ datastores)");
ABSL_FLAG(std::string, knn_lm_lambda, "0,0.05,0.1,0.15,0.2,0.25,0.3,0.4,0.5",
          "kNN-LM interpolation weights to sweep (0 = the model alone)");
ABSL_FLAG(std::string, knn_lm_temperature, "1,3,10,30,100",
          "kNN-LM temperatures to sweep, in squared-L2 units of the keys");
ABSL_FLAG(int, knn_lm_latency_queries, 256,
          "time this many single-query datastore searches on real keys (0 = skip)");
ABSL_FLAG(bool, plot, true, "draw PNG plots with gnuplot");
ABSL_FLAG(std::string, plot_script, "", "gnuplot script (default: the source tree's "
                                        "scripts/plot_eval.gp)");

namespace {

namespace ev = mnemo::eval;
namespace fs = std::filesystem;

int Fail(const std::string& message) {
  std::fprintf(stderr, "mnemo-eval: %s\n", message.c_str());
  return 1;
}

template <typename T>
bool ParseList(const std::string& text, std::vector<T>& out) {
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    T value;
    if constexpr (std::is_same_v<T, float>) {
      if (!absl::SimpleAtof(absl::StripAsciiWhitespace(part), &value)) return false;
    } else {
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &value)) return false;
    }
    out.push_back(value);
  }
  return true;
}

std::string NowUtc() {
  std::time_t now = std::time(nullptr);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return buffer;
}

// Where the held-out files come from, and their paths.
absl::StatusOr<std::pair<std::string, std::vector<std::string>>> ResolveData(
    const std::string& model_dir) {
  std::string source = absl::GetFlag(FLAGS_data);
  if (source.empty()) source = absl::GetFlag(FLAGS_data_list);
  if (source.empty()) {
    source = (fs::path(model_dir) / "split.json").string();
    std::error_code error;
    if (!fs::exists(source, error)) {
      return absl::InvalidArgumentError(
          absl::StrCat("no --data or --data_list, and ", source, " does not exist"));
    }
  }
  absl::StatusOr<std::vector<std::string>> paths = mnemo::corpus::ListDataFiles(source);
  if (!paths.ok()) return paths.status();
  return std::make_pair(source, std::move(*paths));
}

std::string MemoryOptionsText(const mnemo::model::ModelConfig& c, int knn_entries) {
  if (c.knn_layer >= 0) {
    return absl::StrCat(c.cmem_len > 0 ? "XL + compressive + kNN " : "XL + kNN ",
                        ev::FormatEntries(knn_entries),
                        knn_entries == c.knn_mem_len ? " (the model's default)" : "");
  }
  return c.cmem_len > 0 ? "XL + compressive" : "XL memory";
}

int Run(int argc, char** argv) {
  const std::string model_dir = absl::GetFlag(FLAGS_model);
  if (model_dir.empty()) return Fail("--model DIR is required");
  std::vector<int> knn_sizes;
  std::vector<float> thresholds;
  std::vector<int64_t> distances;
  if (!ParseList(absl::GetFlag(FLAGS_knn_sizes), knn_sizes)) return Fail("bad --knn_sizes");
  if (!ParseList(absl::GetFlag(FLAGS_exit_thresholds), thresholds)) {
    return Fail("bad --exit_thresholds");
  }
  if (!ParseList(absl::GetFlag(FLAGS_passkey_distances), distances)) {
    return Fail("bad --passkey_distances");
  }
  std::sort(knn_sizes.begin(), knn_sizes.end());  // the largest is "full memory"
  const std::vector<std::string> mode_list =
      absl::StrSplit(absl::GetFlag(FLAGS_modes), ',', absl::SkipWhitespace());
  const std::set<std::string> passes(mode_list.begin(), mode_list.end());
  for (const std::string& p : passes) {
    if (p != "none" && p != "xl" && p != "cmem" && p != "knn" && p != "exit") {
      return Fail(absl::StrCat("unknown --modes entry '", p, "'"));
    }
  }
  if (absl::GetFlag(FLAGS_threads) > 0) {
    at::set_num_threads(absl::GetFlag(FLAGS_threads));
    omp_set_num_threads(absl::GetFlag(FLAGS_threads));  // FAISS (datastore search)
  }

  ev::EvalReport report;
  report.command = absl::StrJoin(argv, argv + argc, " ");
  report.started_utc = NowUtc();
  report.threads = at::get_num_threads();
  report.chunk = absl::GetFlag(FLAGS_chunk);
  report.model_dir = model_dir;
  report.min_bytes = absl::GetFlag(FLAGS_min_bytes);
  report.max_bytes_per_file = absl::GetFlag(FLAGS_max_bytes_per_file);

  const absl::StatusOr<torch::ScalarType> weight_dtype =
      mnemo::model::ParseWeightDtype(absl::GetFlag(FLAGS_weight_dtype));
  if (!weight_dtype.ok()) return Fail(std::string(weight_dtype.status().message()));
  mnemo::model::LoadOptions load;
  load.weight_dtype = *weight_dtype;
  auto model = mnemo::model::Model::Load(model_dir, load);
  if (!model.ok()) return Fail(std::string(model.status().message()));
  if (*weight_dtype == torch::kFloat16) {
    report.notes.push_back("weights rounded to float16 (--weight_dtype float16)");
  } else if (*weight_dtype == torch::kBFloat16) {
    report.notes.push_back(
        "weights and the products' inputs rounded to bfloat16 (--weight_dtype bfloat16)");
  }
  report.config = (*model)->config();
  report.parameters = (*model)->ParameterCount();

  auto data = ResolveData(model_dir);
  if (!data.ok()) return Fail(std::string(data.status().message()));
  report.data_source = data->first;
  const ev::CorpusOptions corpus_options{report.min_bytes, absl::GetFlag(FLAGS_max_files),
                                         report.max_bytes_per_file};
  auto documents = ev::LoadCorpus(data->second, corpus_options);
  if (!documents.ok()) return Fail(std::string(documents.status().message()));
  for (const ev::Document& d : *documents) {
    report.files.push_back(d.path);
    report.file_bytes.push_back(static_cast<int64_t>(d.bytes.size()));
  }
  const int64_t corpus_bytes = ev::TotalBytes(*documents);
  const int64_t longest = *std::max_element(report.file_bytes.begin(), report.file_bytes.end());
  for (int size : knn_sizes) {
    if (size >= longest && report.config.knn_layer >= 0) {
      report.notes.push_back(absl::StrCat(
          "The longest file scored has ", longest, " bytes, so kNN memories of ",
          ev::FormatEntries(size), " entries or more never fill and behave alike"));
      break;
    }
  }

  // Plan every pass first so the progress meter knows the total work.
  std::vector<ev::MemoryMode> modes = ev::PlanMemoryModes(report.config, knn_sizes);
  const absl::StatusOr<bool> half_rings = mnemo::model::ParseKvDtype(absl::GetFlag(FLAGS_kv_dtype));
  if (!half_rings.ok()) return Fail(std::string(half_rings.status().message()));
  if (*half_rings) {
    report.notes.push_back("memory modes with float16 attention rings (--kv_dtype float16)");
  }
  std::vector<ev::MemoryMode> to_run;
  for (ev::MemoryMode& m : modes) {
    m.options.half_rings = *half_rings;
    const std::string pass = m.no_memory                        ? "none"
                             : m.key == "xl"                    ? "xl"
                             : m.key == "xl_cmem"               ? "cmem"
                                                                : "knn";
    if (!passes.count(pass)) {
      m.skip_reason = "not requested (--modes)";
    } else if (!m.skip_reason.empty()) {
      report.notes.push_back(absl::StrCat(m.label, " skipped: ", m.skip_reason));
    } else {
      to_run.push_back(m);
    }
  }
  if (passes.count("exit")) {
    thresholds.insert(thresholds.begin(), 2.0f);  // the full-depth row first
  } else {
    thresholds.clear();
  }
  std::vector<ev::Document> filler;
  const bool passkey = absl::GetFlag(FLAGS_passkey);
  std::vector<int> seeds;
  if (!ParseList(absl::GetFlag(FLAGS_passkey_seeds), seeds) || seeds.empty() ||
      (seeds.size() != 1 && seeds.size() != distances.size())) {
    return Fail("--passkey_seeds needs one count or one per --passkey_distances entry");
  }
  seeds.resize(distances.size(), seeds[0]);
  int64_t passkey_bytes = 0;
  if (passkey) {
    auto all = ev::LoadCorpus(data->second, {/*min_bytes=*/1, 0, 0});
    if (!all.ok()) return Fail(std::string(all.status().message()));
    filler = std::move(*all);
    const int settings = report.config.knn_layer >= 0 ? 2 : 1;
    for (size_t i = 0; i < distances.size(); ++i) {
      passkey_bytes += (distances[i] + 128) * seeds[i] * settings;
    }
  }
  // kNN-LM sweep: the datastore is opened against this model's id (a datastore built from
  // other weights is refused).
  std::unique_ptr<mnemo::datastore::Datastore> store;
  ev::KnnLmScoreOptions knn_lm_options;
  int64_t knn_lm_bytes = 0;
  if (const std::string dir = absl::GetFlag(FLAGS_datastore); !dir.empty()) {
    auto id = mnemo::datastore::ComputeModelId(model_dir);
    if (!id.ok()) return Fail(std::string(id.status().message()));
    auto opened = mnemo::datastore::Datastore::Open(dir, *id);
    if (!opened.ok()) return Fail(std::string(opened.status().message()));
    store = std::move(*opened);
    knn_lm_options.memory = {};  // full memory, as the server's sessions and mnemo-index use
    knn_lm_options.search.k = absl::GetFlag(FLAGS_knn_lm_k);
    knn_lm_options.search.nprobe = absl::GetFlag(FLAGS_knn_lm_nprobe);
    knn_lm_options.score.chunk = report.chunk;
    if (!ParseList(absl::GetFlag(FLAGS_knn_lm_lambda), knn_lm_options.grid.lambdas) ||
        !ParseList(absl::GetFlag(FLAGS_knn_lm_temperature), knn_lm_options.grid.temperatures) ||
        knn_lm_options.grid.size() == 0) {
      return Fail("bad --knn_lm_lambda or --knn_lm_temperature");
    }
    knn_lm_bytes = corpus_bytes + std::max(0, absl::GetFlag(FLAGS_knn_lm_latency_queries));
  }
  const int64_t total = corpus_bytes * static_cast<int64_t>(to_run.size() + thresholds.size()) +
                        passkey_bytes + knn_lm_bytes;
  std::fprintf(stderr,
               "mnemo-eval: %s (%d layers, %lld parameters), %zu files / %lld bytes from %s; "
               "%zu memory passes, %zu exit passes%s%s; %d threads\n",
               model_dir.c_str(), report.config.n_layers,
               static_cast<long long>(report.parameters), documents->size(),
               static_cast<long long>(corpus_bytes), report.data_source.c_str(), to_run.size(),
               thresholds.size(), passkey ? ", passkey" : "",
               store ? absl::StrCat(", kNN-LM sweep on ", store->entries(), " entries").c_str()
                     : "",
               report.threads);

  ev::ProgressMeter progress(total, stderr);
  knn_lm_options.score.on_progress = [&progress](int64_t bytes) { progress.Advance(bytes); };
  ev::Evaluator evaluator(**model, *documents, report.chunk, &progress);
  const std::string out_dir = absl::GetFlag(FLAGS_out);
  for (const ev::MemoryMode& m : modes) {
    if (!m.skip_reason.empty()) {
      report.modes.push_back(ev::ModeResult{m, {}, {}, 0.0});
      continue;
    }
    auto result = evaluator.RunMemoryMode(m);
    if (!result.ok()) return Fail(std::string(result.status().message()));
    progress.Log(absl::StrFormat("  %-32s %.4f bpb  (%.0f s)", m.label, result->totals.Bpb(),
                                 result->seconds));
    report.modes.push_back(std::move(*result));
  }

  const mnemo::model::ModelConfig& c = report.config;
  const int exit_knn = absl::GetFlag(FLAGS_exit_knn_mem_len) > 0
                           ? absl::GetFlag(FLAGS_exit_knn_mem_len)
                           : c.knn_mem_len;
  const mnemo::model::MemoryOptions exit_memory{true, true, exit_knn};
  report.exit_memory = MemoryOptionsText(c, exit_knn);
  for (float threshold : thresholds) {
    auto result = evaluator.RunExit(threshold, exit_memory);
    if (!result.ok()) return Fail(std::string(result.status().message()));
    progress.Log(absl::StrFormat("  exit %-27s %.4f bpb, %.2f layers  (%.0f s)",
                                 result->full_depth() ? "full depth" : absl::StrCat(threshold),
                                 result->totals.Bpb(), result->totals.AvgLayers(),
                                 result->seconds));
    report.exits.push_back(std::move(*result));
  }
  // Cross-check: ForwardWithExit at full depth must match Forward with the same memory.
  const std::string same_key = c.knn_layer >= 0
                                   ? absl::StrCat(c.cmem_len > 0 ? "xl_cmem_knn_" : "xl_knn_",
                                                  exit_knn)
                                   : (c.cmem_len > 0 ? "xl_cmem" : "xl");
  const ev::ModeResult* same = ev::FindMode(report, same_key);
  const ev::ExitResult* full = ev::FullDepthExit(report);
  if (same != nullptr && full != nullptr) {
    report.notes.push_back(absl::StrFormat(
        "Consistency: full-depth ForwardWithExit %.5f bpb vs Forward %.5f bpb (%s)",
        full->totals.Bpb(), same->totals.Bpb(), same->mode.label));
  }

  if (passkey) {
    ev::Evaluator passkey_evaluator(**model, filler, report.chunk, &progress);
    for (size_t i = 0; i < distances.size(); ++i) {
      const int64_t distance = distances[i];
      for (bool knn : {true, false}) {
        if (knn && c.knn_layer < 0) {
          report.notes.push_back("Passkey with kNN skipped: the model has no kNN layer");
          continue;
        }
        auto result = passkey_evaluator.RunPasskey(distance, knn, seeds[i]);
        if (!result.ok()) return Fail(std::string(result.status().message()));
        progress.Log(absl::StrFormat("  passkey %-8d kNN %-3s %d/%d  (%.0f s)", distance,
                                     knn ? "on" : "off", result->correct, result->trials,
                                     result->seconds));
        report.passkey.push_back(std::move(*result));
      }
    }
  }
  std::optional<ev::KnnLmReport> knn_lm_report;
  if (store != nullptr) {
    knn_lm_report.emplace();
    ev::KnnLmReport& kr = *knn_lm_report;
    kr.command = report.command;
    kr.started_utc = NowUtc();
    kr.threads = report.threads;
    kr.chunk = report.chunk;
    kr.model_dir = model_dir;
    kr.memory = MemoryOptionsText(c, c.knn_mem_len);
    kr.datastore_dir = absl::GetFlag(FLAGS_datastore);
    kr.manifest = store->manifest();
    kr.k = knn_lm_options.search.k;
    kr.nprobe = knn_lm_options.search.nprobe;
    kr.data_source = report.data_source;
    kr.files = report.files;
    const double sweep_start = progress.ElapsedSeconds();
    std::vector<ev::KnnLmTotals> per_file;
    for (size_t i = 0; i < documents->size(); ++i) {
      progress.SetStage(absl::StrFormat("kNN-LM | file %d/%d", i + 1, documents->size()));
      auto totals = ev::ScoreWithKnnLm(**model, *store, (*documents)[i].bytes, knn_lm_options);
      if (!totals.ok()) {
        return Fail(absl::StrCat("kNN-LM on ", (*documents)[i].path, ": ",
                                 totals.status().message()));
      }
      per_file.push_back(std::move(*totals));
    }
    kr.sweep = ev::SummarizeSweep(knn_lm_options.grid, std::move(per_file));
    const int latency_queries = absl::GetFlag(FLAGS_knn_lm_latency_queries);
    if (latency_queries > 0) {
      progress.SetStage("kNN-LM search latency");
      auto latency = ev::MeasureSearchLatency(**model, *store, (*documents)[0].bytes,
                                              latency_queries, knn_lm_options);
      if (!latency.ok()) return Fail(std::string(latency.status().message()));
      kr.latency = *latency;
      progress.Advance(latency->queries);
    }
    kr.seconds = progress.ElapsedSeconds() - sweep_start;
    const ev::KnnLmSweep& sw = kr.sweep;
    progress.Log(absl::StrFormat(
        "  kNN-LM lambda %g T %g: validation %.4f -> %.4f bpb, test %.4f -> %.4f bpb (%+.2f%%)",
        sw.grid.lambda(sw.chosen), sw.grid.temperature(sw.chosen), sw.validation.lm.Bpb(),
        sw.validation.Bpb(sw.chosen), sw.test.lm.Bpb(), sw.test.Bpb(sw.chosen),
        sw.test.lm.Bpb() > 0 ? 100.0 * (sw.test.Bpb(sw.chosen) / sw.test.lm.Bpb() - 1.0) : 0.0));
  }
  progress.Finish();
  report.seconds = progress.ElapsedSeconds();

  if (knn_lm_report) {
    if (absl::Status s = ev::WriteKnnLmReportFiles(*knn_lm_report, out_dir); !s.ok()) {
      return Fail(std::string(s.message()));
    }
    std::fputs(ev::RenderKnnLmMarkdown(*knn_lm_report).c_str(), stdout);
    std::fprintf(stderr, "mnemo-eval: wrote %s/knn_lm_eval.md and knn_lm_eval.json\n",
                 out_dir.c_str());
    if (to_run.empty() && thresholds.empty() && !passkey) return 0;  // the sweep alone
  }
  if (absl::Status s = ev::WriteReportFiles(report, out_dir); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  if (absl::GetFlag(FLAGS_plot)) {
    std::string script = absl::GetFlag(FLAGS_plot_script);
    if (script.empty()) script = ev::DefaultPlotScript();
    if (absl::Status s = ev::RunPlotScript(script, out_dir); !s.ok()) {
      std::fprintf(stderr, "mnemo-eval: plots not drawn: %s\n", std::string(s.message()).c_str());
    }
  }
  std::fputs(ev::RenderMarkdown(report).c_str(), stdout);
  std::fprintf(stderr, "mnemo-eval: wrote %s/eval.md and eval.json\n", out_dir.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  mnemo::util::ConfigureCpuRuntime(argv);
  absl::SetProgramUsageMessage(
      "mnemo-eval --model DIR [--data DIR_OR_LIST | --data_list FILE] [--out DIR] [--passkey]");
  absl::ParseCommandLine(argc, argv);
  return Run(argc, argv);
}
