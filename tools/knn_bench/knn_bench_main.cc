// mnemo-knn-bench: cost and recall of the per-session kNN memory (engine/knn) by size.
//
//   mnemo-knn-bench [--sizes 4096,65536,1048576 --heads 4 --dim 64 --k 32 --nprobe 8 ...]
//
// For each size N a memory of capacity N is filled with N positions of clustered synthetic keys
// (engine/knn/clustered_keys.h) in prefill segments, then searched like a decoder (one query per
// head, window = everything but the newest mem_len positions) and like a prefill segment (256
// queries per head, windows sliding by one). Recall@k is against an exact scan of the same
// windows. Prints one Markdown table. Flags and main only; the work is in engine/knn.
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/knn/clustered_keys.h"
#include "engine/knn/knn_memory.h"
#include "engine/util/cpu_backend.h"

ABSL_FLAG(std::string, sizes, "4096,65536,1048576", "memory sizes (entries per head), comma-separated");
ABSL_FLAG(int, heads, 4, "attention heads");
ABSL_FLAG(int, dim, 64, "head dimension");
ABSL_FLAG(int, k, 32, "neighbours per query");
ABSL_FLAG(int, nprobe, 8, "IVF lists scanned per query");
ABSL_FLAG(int, nlist, 0, "IVF lists per head (0 = the memory's default for the size)");
ABSL_FLAG(int64_t, exact_threshold, 65536, "entries per head above which search uses IVF");
ABSL_FLAG(int, train_iterations, 4, "k-means iterations when the threshold is crossed");
ABSL_FLAG(int64_t, group_spread, 0, "window spread per FAISS call (0 = k)");
ABSL_FLAG(int, centres, 3000, "clusters of the synthetic keys (0 = uniform on the sphere)");
ABSL_FLAG(double, noise, 1.0, "cluster noise norm relative to the unit centre");
ABSL_FLAG(int, segment, 256, "positions per Append while filling (a prefill segment)");
ABSL_FLAG(int, mem_len, 256, "newest positions a query does not retrieve (its XL window)");
ABSL_FLAG(int, decode_steps, 200, "decode-step searches timed per size");
ABSL_FLAG(int, prefill_queries, 256, "queries per head of one prefill segment");
ABSL_FLAG(int, prefill_reps, 3, "prefill segments timed per size");
ABSL_FLAG(int, threads, 0, "intra-op threads (0 = all cores)");
ABSL_FLAG(uint64_t, seed, 1, "random seed");

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Positions [H, Q, k] of the exact top-k in each window: keys [N, H, d] hold positions 0..N-1.
torch::Tensor ExactTopK(const torch::Tensor& keys, const torch::Tensor& queries, int k,
                        const torch::Tensor& lo, const torch::Tensor& hi) {
  const int64_t h = queries.size(0), q = queries.size(1), n = keys.size(0);
  torch::Tensor out = torch::empty({h, q, k}, torch::kInt64);
  torch::Tensor position = torch::arange(n, torch::kInt64);
  for (int64_t head = 0; head < h; ++head) {
    torch::Tensor head_keys = keys.select(1, head);  // [N, d]
    for (int64_t q0 = 0; q0 < q; q0 += 32) {
      const int64_t rows = std::min<int64_t>(32, q - q0);
      torch::Tensor scores = torch::matmul(queries[head].narrow(0, q0, rows), head_keys.t());
      torch::Tensor inside = position.unsqueeze(0).ge(lo.narrow(0, q0, rows).unsqueeze(1)) &
                             position.unsqueeze(0).lt(hi.narrow(0, q0, rows).unsqueeze(1));
      scores.masked_fill_(inside.logical_not(), -std::numeric_limits<float>::infinity());
      out[head].narrow(0, q0, rows).copy_(std::get<1>(scores.topk(k, 1)));
    }
  }
  return out;
}

double Recall(const torch::Tensor& found, const torch::Tensor& exact) {
  auto f = found.accessor<int64_t, 3>();
  auto e = exact.accessor<int64_t, 3>();
  int64_t hit = 0, total = 0;
  for (int64_t a = 0; a < found.size(0); ++a) {
    for (int64_t b = 0; b < found.size(1); ++b) {
      std::set<int64_t> mine;
      for (int64_t c = 0; c < found.size(2); ++c) mine.insert(f[a][b][c]);
      for (int64_t c = 0; c < exact.size(2); ++c) hit += mine.count(e[a][b][c]), ++total;
    }
  }
  return total ? static_cast<double>(hit) / total : 1.0;
}

struct Row {
  int64_t size = 0;
  std::string mode;
  int nlist = 0, nprobe = 0;
  double add_us_per_entry = 0;     // steady appends in segments, per (position, head)
  double train_s = 0;              // the Append that crossed the threshold (0 if none)
  double decode_append_us = 0;     // one position, all heads
  double decode_search_us = 0;     // one query per head, all heads
  double prefill_us_per_query = 0; // per query position, all heads
  double exact_us_per_query = 0;   // the reference scan, per query position, all heads
  double recall_decode = 0, recall_prefill = 0;
  double mib = 0;
};

Row RunSize(int64_t n) {
  const int heads = absl::GetFlag(FLAGS_heads), dim = absl::GetFlag(FLAGS_dim);
  const int k = absl::GetFlag(FLAGS_k), segment = absl::GetFlag(FLAGS_segment);
  const int64_t mem_len = absl::GetFlag(FLAGS_mem_len);
  mnemo::knn::KnnMemoryConfig config;
  config.heads = heads;
  config.dim = dim;
  config.capacity = n;
  config.exact_threshold = absl::GetFlag(FLAGS_exact_threshold);
  config.nlist = absl::GetFlag(FLAGS_nlist);
  config.nprobe = absl::GetFlag(FLAGS_nprobe);
  config.group_spread = absl::GetFlag(FLAGS_group_spread);
  config.train_iterations = absl::GetFlag(FLAGS_train_iterations);
  config.seed = absl::GetFlag(FLAGS_seed);
  auto created = mnemo::knn::KnnMemory::Create(config);
  if (!created.ok()) {
    std::fprintf(stderr, "mnemo-knn-bench: %s\n", std::string(created.status().message()).c_str());
    std::exit(1);
  }
  std::unique_ptr<mnemo::knn::KnnMemory> memory = std::move(created).value();
  mnemo::knn::ClusteredKeys data(absl::GetFlag(FLAGS_centres), dim, absl::GetFlag(FLAGS_noise),
                                 absl::GetFlag(FLAGS_seed));
  torch::Tensor keys = data.SampleHeads(n, heads);  // [N, H, d], kept for the exact reference
  torch::Tensor values = torch::randn({segment, heads, dim});
  Row row;
  row.size = n;

  double steady_s = 0;
  int64_t steady_positions = 0;
  for (int64_t at = 0; at < n; at += segment) {
    const int64_t len = std::min<int64_t>(segment, n - at);
    const bool was_exact = memory->mode() == mnemo::knn::KnnMode::kExact;
    const auto start = Clock::now();
    absl::Status s = memory->Append(keys.narrow(0, at, len), values.narrow(0, 0, len));
    const double took = Seconds(start);
    if (!s.ok()) {
      std::fprintf(stderr, "mnemo-knn-bench: %s\n", std::string(s.message()).c_str());
      std::exit(1);
    }
    if (was_exact && memory->mode() == mnemo::knn::KnnMode::kIvf) {
      row.train_s = took;
    } else {
      steady_s += took;
      steady_positions += len;
    }
  }
  row.add_us_per_entry = 1e6 * steady_s / std::max<int64_t>(1, steady_positions * heads);
  row.mode = mnemo::knn::KnnModeName(memory->mode());
  row.nlist = memory->nlist();
  row.nprobe = memory->config().nprobe;
  row.mib = memory->bytes() / 1048576.0;

  // Decode: one query per head over everything but the newest mem_len positions.
  const int steps = absl::GetFlag(FLAGS_decode_steps);
  const int64_t hi_all = std::max<int64_t>(n - mem_len, 1);
  torch::Tensor dq = data.SampleHeads(steps, heads).permute({1, 0, 2}).contiguous();  // [H, S, d]
  torch::Tensor dlo = torch::zeros({1}, torch::kInt64), dhi = torch::full({1}, hi_all, torch::kInt64);
  std::vector<torch::Tensor> decode_found;
  auto start = Clock::now();
  for (int s = 0; s < steps; ++s) {
    decode_found.push_back(memory->Search(dq.narrow(1, s, 1), k, dlo, dhi).value().positions);
  }
  row.decode_search_us = 1e6 * Seconds(start) / steps;
  torch::Tensor all_lo = torch::zeros({steps}, torch::kInt64);
  torch::Tensor all_hi = torch::full({steps}, hi_all, torch::kInt64);
  start = Clock::now();
  torch::Tensor decode_exact = ExactTopK(keys, dq, k, all_lo, all_hi);
  row.exact_us_per_query = 1e6 * Seconds(start) / steps;
  row.recall_decode = Recall(torch::cat(decode_found, 1), decode_exact);

  // Prefill: Q queries per head, windows [i, hi_all - Q + 1 + i) sliding by one.
  const int q = absl::GetFlag(FLAGS_prefill_queries), reps = absl::GetFlag(FLAGS_prefill_reps);
  torch::Tensor plo = torch::arange(0, q, torch::kInt64);
  torch::Tensor phi = (plo + (hi_all - q + 1)).clamp_min(plo);
  std::vector<torch::Tensor> pq, prefill_found;
  for (int r = 0; r < reps; ++r) {
    pq.push_back(data.SampleHeads(q, heads).permute({1, 0, 2}).contiguous());
  }
  start = Clock::now();
  for (int r = 0; r < reps; ++r) prefill_found.push_back(memory->Search(pq[r], k, plo, phi).value().positions);
  row.prefill_us_per_query = 1e6 * Seconds(start) / (reps * q);
  row.recall_prefill = Recall(prefill_found[0], ExactTopK(keys, pq[0], k, plo, phi));

  // Decode appends at full size (evicting as they go).
  torch::Tensor one = data.SampleHeads(steps, heads);
  start = Clock::now();
  for (int s = 0; s < steps; ++s) {
    if (!memory->Append(one.narrow(0, s, 1), values.narrow(0, 0, 1)).ok()) std::exit(1);
  }
  row.decode_append_us = 1e6 * Seconds(start) / steps;
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  mnemo::util::ConfigureCpuRuntime(argv);
  std::vector<std::string> args(argv, argv + argc);
  absl::SetProgramUsageMessage("mnemo-knn-bench [--sizes 4096,65536,1048576 --nprobe 8 ...]");
  absl::ParseCommandLine(argc, argv);
  // As the engine does: LibTorch alone would count physical cores (1 on a 2-vCPU VM).
  const int threads = absl::GetFlag(FLAGS_threads);
  at::set_num_threads(threads > 0 ? threads
                                  : std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
  std::vector<int64_t> sizes;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_sizes), ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(s, &v) || v < 1) {
      std::fprintf(stderr, "mnemo-knn-bench: bad size '%s'\n", std::string(s).c_str());
      return 2;
    }
    sizes.push_back(v);
  }
  std::printf("command: %s\n", absl::StrJoin(args, " ").c_str());
  std::printf("threads: %d, heads %d, dim %d, k %d, centres %d, noise %.2f\n\n",
              at::get_num_threads(), absl::GetFlag(FLAGS_heads), absl::GetFlag(FLAGS_dim),
              absl::GetFlag(FLAGS_k), absl::GetFlag(FLAGS_centres), absl::GetFlag(FLAGS_noise));
  std::printf("| entries/head | mode | nlist/nprobe | add µs/entry | train s | decode append µs | "
              "decode search µs | prefill search µs/query | exact scan µs/query | "
              "recall@k decode | recall@k prefill | MiB |\n");
  std::printf("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int64_t n : sizes) {
    Row r = RunSize(n);
    const std::string lists = r.nlist ? absl::StrCat(r.nlist, "/", r.nprobe) : "-";
    std::printf("| %lld | %s | %s | %.2f | %.2f | %.1f | %.1f | %.1f | %.1f | %.3f | %.3f | %.1f |\n",
                static_cast<long long>(r.size), r.mode.c_str(), lists.c_str(), r.add_us_per_entry,
                r.train_s, r.decode_append_us, r.decode_search_us, r.prefill_us_per_query,
                r.exact_us_per_query, r.recall_decode, r.recall_prefill, r.mib);
    std::fflush(stdout);
  }
  return 0;
}
