// mnemo-decode-bench: per-token decode latency as one session's history grows (docs/design.md §8:
// 1K -> 1M tokens, ratio <= 1.3), for mnemo's bounded memory with and without its kNN layer,
// and for a full-attention baseline (every past position visible, no memory bound).
//
//   mnemo-decode-bench [--model DIR --history 1024,4096,65536,1048576 --knn_capacity 65536
//                       --modes knn,noknn,full --datastore DIR --threads 2 ...]
//
// Modes:
//  knn    Model::NewMemory({knn_mem_len = knn_capacity, knn_exact_threshold}): XL + compressed
//         memory + the kNN layer's knn::KnnMemory (holding min(history, capacity) entries).
//  noknn  the same with MemoryOptions.knn = false; knn - noknn is the kNN layer's cost.
//  full   a memory whose XL window is the whole history (tools/decode_bench/
//         full_attention_memory.h), for histories <= --full_max_history; filled by a real
//         prefill up to --full_real_max, synthetically beyond.
// knn and noknn ingest real text (*.py below --corpus, cycling) into ONE session up to each
// history in turn; at each checkpoint --warmup then --tokens single-token Model::Forward calls
// are timed (teacher-forced on the text). In knn mode the kNN memory's Search alone is also
// timed on the live store (one query per head, the model's window and k; queries are stored
// keys, a stand-in for the model's queries). With --datastore, each decode step's kNN-LM key
// is also searched in that datastore (k = --datastore_k), timed apart from the forward pass.
// Prints Markdown tables to stdout, progress to stderr. Flags and wiring only.
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/datastore/datastore.h"
#include "engine/datastore/model_id.h"
#include "engine/knn/knn_memory.h"
#include "engine/model/model.h"
#include "engine/util/cpu_backend.h"
#include "engine/util/status_macros.h"
#include "tools/decode_bench/full_attention_memory.h"
#include "tools/decode_bench/ingest.h"
#include "tools/decode_bench/latency.h"
#include "tools/decode_bench/text_source.h"

ABSL_FLAG(std::string, model, "/work/main/models/mnemo-stdlib", "model directory");
ABSL_FLAG(std::string, corpus, "/usr/lib/python3.11", "text: *.py files below this directory");
ABSL_FLAG(int, window, 0, "Hugging Face models: the session window (mnemo-server --window)");
ABSL_FLAG(int, sink_tokens, -1,
          "Hugging Face models: attention sinks (mnemo-server --sink_tokens)");
ABSL_FLAG(std::string, history, "1024,4096,65536,1048576", "history lengths (tokens), ascending");
ABSL_FLAG(std::string, modes, "knn,noknn,full", "which memories to time: knn, noknn, full");
ABSL_FLAG(int, knn_capacity, 65536, "kNN memory length (MemoryOptions.knn_mem_len)");
ABSL_FLAG(int64_t, knn_exact_threshold, 0,
          "kNN entries searched exactly before FAISS IVF (0 = the memory's default, 65536)");
ABSL_FLAG(std::string, kv_dtype, "float32",
          "element type of the attention rings (raw and compressed): float32 or float16");
ABSL_FLAG(std::string, weight_dtype, "float32",
          "the model's weights: float32, float16 or bfloat16 (as mnemo-server)");
ABSL_FLAG(int, tokens, 200, "decode tokens timed per checkpoint");
ABSL_FLAG(int, warmup, 20, "decode tokens run before timing at each checkpoint");
ABSL_FLAG(int64_t, full_max_history, 262144, "largest history the full-attention baseline runs");
ABSL_FLAG(int64_t, full_real_max, 16384,
          "full attention: histories up to this are prefilled for real (O(n^2)), larger ones "
          "synthetically");
ABSL_FLAG(int, full_tokens, 50, "decode tokens timed per full-attention checkpoint");
ABSL_FLAG(std::string, datastore, "", "kNN-LM datastore directory to search per decode step");
ABSL_FLAG(int, datastore_k, 16, "datastore neighbours per step");
ABSL_FLAG(int, datastore_nprobe, 8, "datastore IVF lists probed");
ABSL_FLAG(int64_t, chunk, 4096, "tokens per Forward call while ingesting");
ABSL_FLAG(int, threads, 2, "intra-op threads");

namespace {

using Clock = std::chrono::steady_clock;
using mnemo::tools::Latency;

double Ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

struct Checkpoint {
  int64_t history = 0;           // tokens in the session when timing started
  Latency forward;               // ms per decode token (Model::Forward of one token)
  Latency knn_search;            // ms per kNN memory Search (knn mode)
  Latency datastore;             // ms per datastore Search (with --datastore)
  int64_t knn_entries = 0;       // per head in the kNN store
  std::string knn_mode = "-";
  double memory_mib = 0;         // SessionMemory::bytes()
  double ingest_tok_s = 0;       // prefill rate reaching this checkpoint
  std::string fill = "real";     // full attention: real or synthetic prefill
};

std::string OrDash(const Latency& latency) {
  return latency.count ? absl::StrFormat("%.3f", latency.p50) : "-";
}

// Times the kNN store's Search alone, as the kNN layer calls it for one decode token.
Latency TimeKnnSearch(const mnemo::knn::KnnMemory& store, const mnemo::model::ModelConfig& c,
                      int64_t knn_len, int64_t t, int reps) {
  const int64_t hi = t - c.mem_len, lo = hi - knn_len;
  torch::Tensor lo_t = torch::full({1}, lo, torch::kInt64), hi_t = torch::full({1}, hi, torch::kInt64);
  if (hi <= store.oldest_position()) return {};
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    // A stored key as the query: probe with a random direction, take the best hit.
    torch::Tensor probe = torch::randn({c.n_heads, 1, c.d_head});
    probe = probe / probe.norm(2, -1, true);
    auto best = store.Search(probe, 1, lo_t, hi_t);
    if (!best.ok()) break;
    torch::Tensor query = best->keys.select(2, 0).contiguous();  // [H, 1, d]
    const auto start = Clock::now();
    auto found = store.Search(query, c.knn_topk, lo_t, hi_t);
    ms.push_back(Ms(start));
    if (!found.ok()) break;
  }
  return mnemo::tools::Summarise(std::move(ms));
}

// Decodes `warmup` then `count` text tokens one at a time, timing each Forward.
absl::StatusOr<Checkpoint> TimeDecode(mnemo::model::Model& model, mnemo::memory::SessionMemory& memory,
                                      mnemo::tools::TextSource& text, int warmup, int count,
                                      const mnemo::datastore::Datastore* datastore) {
  Checkpoint out;
  out.history = memory.next_position();
  std::vector<double> forward_ms, datastore_ms;
  const std::vector<int> tokens = text.Next(warmup + count);
  mnemo::datastore::SearchOptions search;
  search.k = absl::GetFlag(FLAGS_datastore_k);
  search.nprobe = absl::GetFlag(FLAGS_datastore_nprobe);
  for (int i = 0; i < warmup + count; ++i) {
    torch::Tensor key;
    const auto start = Clock::now();
    MNEMO_RETURN_IF_ERROR(model
                              .Forward({tokens[i]}, memory, mnemo::model::Outputs::kLast,
                                       datastore != nullptr ? &key : nullptr)
                              .status());
    const double ms = Ms(start);
    if (i >= warmup) forward_ms.push_back(ms);
    if (datastore != nullptr) {
      const auto ds_start = Clock::now();
      MNEMO_RETURN_IF_ERROR(datastore->Search(key, search).status());  // key: [1, d_model]
      if (i >= warmup) datastore_ms.push_back(Ms(ds_start));
    }
  }
  out.forward = mnemo::tools::Summarise(std::move(forward_ms));
  out.datastore = mnemo::tools::Summarise(std::move(datastore_ms));
  out.memory_mib = memory.bytes() / 1048576.0;
  return out;
}

absl::Status Run(const std::vector<int64_t>& histories, const std::vector<std::string>& modes) {
  mnemo::model::LoadOptions load;
  load.window = absl::GetFlag(FLAGS_window);
  load.sink_tokens = absl::GetFlag(FLAGS_sink_tokens);
  MNEMO_ASSIGN_OR_RETURN(load.weight_dtype,
                         mnemo::model::ParseWeightDtype(absl::GetFlag(FLAGS_weight_dtype)));
  MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<mnemo::model::Model> model,
                         mnemo::model::Model::Load(absl::GetFlag(FLAGS_model), load));
  const mnemo::model::ModelConfig& c = model->config();
  const int tokens = absl::GetFlag(FLAGS_tokens), warmup = absl::GetFlag(FLAGS_warmup);
  std::unique_ptr<mnemo::datastore::Datastore> datastore;
  if (!absl::GetFlag(FLAGS_datastore).empty()) {
    MNEMO_ASSIGN_OR_RETURN(mnemo::datastore::ModelId id,
                           mnemo::datastore::ComputeModelId(absl::GetFlag(FLAGS_model)));
    MNEMO_ASSIGN_OR_RETURN(datastore,
                           mnemo::datastore::Datastore::Open(absl::GetFlag(FLAGS_datastore), id));
    std::printf("datastore: %s, %lld entries, d %d, k %d, nprobe %d\n",
                absl::GetFlag(FLAGS_datastore).c_str(), static_cast<long long>(datastore->entries()),
                datastore->d(), absl::GetFlag(FLAGS_datastore_k),
                absl::GetFlag(FLAGS_datastore_nprobe));
  }
  std::map<std::string, std::vector<Checkpoint>> results;
  mnemo::tools::IngestOptions ingest;
  ingest.chunk = absl::GetFlag(FLAGS_chunk);

  MNEMO_ASSIGN_OR_RETURN(const bool half_rings,
                         mnemo::model::ParseKvDtype(absl::GetFlag(FLAGS_kv_dtype)));
  // Text to cycle through: 64 MiB for the byte vocabulary; a BPE tokenizer's encode is slower,
  // and 4 MiB of text is still far more than any window.
  const int64_t text_bytes =
      model->tokenizer().name() == "byte" ? int64_t{64} << 20 : int64_t{4} << 20;
  for (const std::string& mode : modes) {
    if (mode == "full") continue;
    MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<mnemo::tools::TextSource> text,
                           mnemo::tools::TextSource::Create(absl::GetFlag(FLAGS_corpus), ".py",
                                                            text_bytes, model->tokenizer()));
    mnemo::model::MemoryOptions options;
    options.knn = mode == "knn";
    options.knn_mem_len = absl::GetFlag(FLAGS_knn_capacity);
    options.knn_exact_threshold = absl::GetFlag(FLAGS_knn_exact_threshold);
    options.half_rings = half_rings;
    mnemo::memory::SessionMemory memory = model->NewMemory(options);
    ingest.label = mode;
    for (int64_t history : histories) {
      const int64_t from = memory.next_position();
      MNEMO_ASSIGN_OR_RETURN(double seconds,
                             mnemo::tools::Ingest(*model, memory, *text, history, ingest));
      MNEMO_ASSIGN_OR_RETURN(Checkpoint point,
                             TimeDecode(*model, memory, *text, warmup, tokens,
                                        mode == "knn" ? datastore.get() : nullptr));
      point.ingest_tok_s = seconds > 0 ? (history - from) / seconds : 0;
      const mnemo::knn::KnnMemory* store =
          c.knn_layer >= 0 ? memory.layer(c.knn_layer).knn_store() : nullptr;
      if (store != nullptr) {
        point.knn_entries = store->size();
        point.knn_mode = mnemo::knn::KnnModeName(store->mode());
        point.knn_search = TimeKnnSearch(*store, c, options.knn_mem_len, memory.next_position(),
                                         tokens);
      }
      std::fprintf(stderr,
                   "[%s] history %lld: decode p50 %.2f p90 %.2f mean %.2f ms; kNN %lld entries "
                   "(%s), search p50 %s ms; datastore p50 %s ms; memory %.1f MiB\n",
                   mode.c_str(), static_cast<long long>(point.history), point.forward.p50,
                   point.forward.p90, point.forward.mean,
                   static_cast<long long>(point.knn_entries), point.knn_mode.c_str(),
                   OrDash(point.knn_search).c_str(), OrDash(point.datastore).c_str(),
                   point.memory_mib);
      results[mode].push_back(point);
    }
  }

  if (std::find(modes.begin(), modes.end(), "full") != modes.end()) {
    MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<mnemo::tools::TextSource> text,
                           mnemo::tools::TextSource::Create(absl::GetFlag(FLAGS_corpus), ".py",
                                                            text_bytes, model->tokenizer()));
    ingest.label = "full";
    for (int64_t history : histories) {
      if (history > absl::GetFlag(FLAGS_full_max_history)) continue;
      // Room for the history plus the decode tokens: none of them leaves the window.
      mnemo::memory::SessionMemory memory =
          mnemo::tools::NewFullAttentionMemory(c, history + warmup + tokens);
      const bool real = history <= absl::GetFlag(FLAGS_full_real_max);
      double seconds = 0;
      if (real) {
        text = std::move(mnemo::tools::TextSource::Create(absl::GetFlag(FLAGS_corpus), ".py",
                                                          text_bytes, model->tokenizer()))
                   .value();
        MNEMO_ASSIGN_OR_RETURN(seconds, mnemo::tools::Ingest(*model, memory, *text, history, ingest));
      } else {
        mnemo::tools::FillSynthetic(memory, history);
      }
      MNEMO_ASSIGN_OR_RETURN(Checkpoint point,
                             TimeDecode(*model, memory, *text, std::min(warmup, 5),
                                        absl::GetFlag(FLAGS_full_tokens), nullptr));
      point.fill = real ? "real" : "synthetic";
      point.ingest_tok_s = seconds > 0 ? history / seconds : 0;
      std::fprintf(stderr, "[full] history %lld (%s): decode p50 %.2f p90 %.2f mean %.2f ms; "
                   "memory %.1f MiB\n", static_cast<long long>(history), point.fill.c_str(),
                   point.forward.p50, point.forward.p90, point.forward.mean, point.memory_mib);
      results["full"].push_back(point);
    }
  }

  // Tables.
  std::printf("\n| mode | history | decode p50 ms | p90 ms | mean ms | tokens | kNN entries/head "
              "| kNN index | kNN search p50 ms | datastore search p50 ms | memory MiB | "
              "ingest tok/s | fill |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|\n");
  for (const std::string& mode : modes) {
    for (const Checkpoint& p : results[mode]) {
      std::printf("| %s | %lld | %.2f | %.2f | %.2f | %d | %lld | %s | %s | %s | %.1f | %.0f | %s |\n",
                  mode.c_str(), static_cast<long long>(p.history), p.forward.p50, p.forward.p90,
                  p.forward.mean, p.forward.count, static_cast<long long>(p.knn_entries),
                  p.knn_mode.c_str(), OrDash(p.knn_search).c_str(), OrDash(p.datastore).c_str(),
                  p.memory_mib,
                  p.ingest_tok_s, mode == "full" ? p.fill.c_str() : "real");
    }
  }
  // The §8 numbers: ratio of the largest to the smallest history, and the kNN share.
  std::printf("\n");
  for (const std::string& mode : modes) {
    const std::vector<Checkpoint>& r = results[mode];
    if (r.size() < 2) continue;
    std::printf("%s: mean ms/token at %lld / at %lld = %.3f (p50 ratio %.3f)\n", mode.c_str(),
                static_cast<long long>(r.back().history), static_cast<long long>(r.front().history),
                r.back().forward.mean / r.front().forward.mean,
                r.back().forward.p50 / r.front().forward.p50);
  }
  if (!results["knn"].empty() && results["knn"].size() == results["noknn"].size()) {
    for (size_t i = 0; i < results["knn"].size(); ++i) {
      const Checkpoint &a = results["knn"][i], &b = results["noknn"][i];
      std::printf("history %lld: kNN adds %.2f ms mean (%.1f%% over no-kNN), %.2f ms p50 (%.1f%%)\n",
                  static_cast<long long>(a.history), a.forward.mean - b.forward.mean,
                  100.0 * (a.forward.mean / b.forward.mean - 1), a.forward.p50 - b.forward.p50,
                  100.0 * (a.forward.p50 / b.forward.p50 - 1));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  mnemo::util::ConfigureCpuRuntime(argv);
  std::vector<std::string> args(argv, argv + argc);
  absl::SetProgramUsageMessage(
      "mnemo-decode-bench [--model DIR --history 1024,4096,65536,1048576 --modes knn,noknn,full]");
  absl::ParseCommandLine(argc, argv);
  at::set_num_threads(std::max(1, absl::GetFlag(FLAGS_threads)));
  std::vector<int64_t> histories;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_history), ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(s, &v) || v < 1 || (!histories.empty() && v <= histories.back())) {
      std::fprintf(stderr, "mnemo-decode-bench: --history wants ascending positive lengths\n");
      return 2;
    }
    histories.push_back(v);
  }
  std::vector<std::string> modes = absl::StrSplit(absl::GetFlag(FLAGS_modes), ',', absl::SkipEmpty());
  for (const std::string& m : modes) {
    if (m != "knn" && m != "noknn" && m != "full") {
      std::fprintf(stderr, "mnemo-decode-bench: unknown mode '%s'\n", m.c_str());
      return 2;
    }
  }
  std::printf("command: %s\n", absl::StrJoin(args, " ").c_str());
  std::printf("threads: %d\n", at::get_num_threads());
  if (absl::Status s = Run(histories, modes); !s.ok()) {
    std::fprintf(stderr, "mnemo-decode-bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
