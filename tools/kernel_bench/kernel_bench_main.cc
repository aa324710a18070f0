// mnemo-kernel-bench: the hand-written CPU kernels of a decode step on one thread, for every
// instruction set this CPU runs (engine/model/cpu_kernels.h), with a model's shapes:
//
//   - PackedLinear over one layer stack's products (qkv, output, both FFN matrices of every
//     layer), packed as float32, float16 and bfloat16 (the last with and without AVX512-BF16's
//     dot product where the CPU has it): ms per pass for R rows (one decode step of R rows in
//     one shard), GFLOP/s and the rate the weights stream at;
//   - HostAttention for S sessions with W visible slots each (all heads), with float32 and
//     float16 rings: µs per call, ns per (slot, head) and the rate keys, values and
//     position-table rows are read at.
//
//   mnemo-kernel-bench [--model models/mnemo-stdlib --rows 1,2,4,8,16 --windows 32,128,384]
//
// Weights, rings and queries are random (the time does not depend on values); the best of
// --repeats timed passes is reported. Prints Markdown tables. Flags and main only.
#include <ATen/Parallel.h>
#include <torch/types.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "engine/model/cpu_kernels.h"
#include "engine/model/host_attention.h"
#include "engine/model/model.h"
#include "engine/model/small_matmul.h"
#include "engine/util/cpu_backend.h"

ABSL_FLAG(std::string, model, "models/mnemo-stdlib", "model directory (its config.json's shapes)");
ABSL_FLAG(std::string, rows, "1,2,4,8,16", "PackedLinear: rows per product, comma-separated");
ABSL_FLAG(std::string, windows, "32,128,384",
          "HostAttention: visible slots per session, comma-separated");
ABSL_FLAG(int, sessions, 16, "HostAttention: sessions (rows) per call");
ABSL_FLAG(int, repeats, 20, "timed passes per measurement (the best is reported)");

namespace {

using mnemo::model::CpuKernel;
using mnemo::model::RingType;

std::vector<int> ParseList(const std::string& text, const char* flag) {
  std::vector<int> values;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int value = 0;
    if (!absl::SimpleAtoi(part, &value) || value < 1) {
      std::fprintf(stderr, "--%s: '%s' is not a positive integer\n", flag,
                   std::string(part).c_str());
      std::exit(2);
    }
    values.push_back(value);
  }
  return values;
}

// Best wall time of `repeats` calls of `pass`, in milliseconds (after one untimed call).
double BestMs(int repeats, const std::function<void()>& pass) {
  pass();
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    pass();
    best = std::min(best, std::chrono::duration<double, std::milli>(
                              std::chrono::steady_clock::now() - start)
                              .count());
  }
  return best;
}

void BenchPackedLinear(const mnemo::model::ModelConfig& c, const std::vector<int>& rows,
                       int repeats) {
  const std::vector<torch::ScalarType> strip_types{torch::kFloat32, torch::kFloat16,
                                                   torch::kBFloat16};
  struct Product {
    torch::Tensor weight;
    std::vector<mnemo::model::PackedLinear> packed;  // one per strip type
  };
  const int64_t width = static_cast<int64_t>(c.n_heads) * c.d_head;
  std::vector<Product> products;
  double weights = 0;  // floats
  for (int layer = 0; layer < c.n_layers; ++layer) {
    for (auto [n, k] : {std::pair<int64_t, int64_t>{3 * width, c.d_model},
                        {c.d_model, width}, {c.d_ff, c.d_model}, {c.d_model, c.d_ff}}) {
      torch::Tensor w = torch::randn({n, k}) / std::sqrt(static_cast<double>(k));
      torch::Tensor b = torch::randn({n});
      Product product{w, {}};
      for (torch::ScalarType type : strip_types) product.packed.emplace_back(w, b, type);
      products.push_back(std::move(product));
      weights += static_cast<double>(n * k);
    }
  }
  std::printf("\n## PackedLinear: %d layers' products (%.1f MB of float32 weights), one thread\n\n",
              c.n_layers, weights * 4 / 1e6);
  std::printf("| kernel | weights | rows | ms per pass | GFLOP/s | weights GB/s | us per row |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (CpuKernel kernel : mnemo::model::AvailableCpuKernels()) {
    mnemo::model::SetCpuKernelForTesting(kernel);
    for (size_t t = 0; t < strip_types.size(); ++t) {
      // Bfloat16 strips with AVX-512: widened and multiplied with FMA, and (where the CPU has
      // it) with AVX512-BF16's dot product, the default there.
      std::vector<bool> dot{false};
      if (strip_types[t] == torch::kBFloat16 && kernel == CpuKernel::kAvx512 &&
          mnemo::model::CpuHasBf16Dot()) {
        dot.push_back(true);
      }
      for (const bool use_dot : dot) {
        mnemo::model::SetBf16DotForTesting(use_dot);
        const std::string name =
            mnemo::model::CpuKernelName(kernel) + (use_dot ? " + bf16 dot" : "");
        const int bytes = strip_types[t] == torch::kFloat32 ? 4 : 2;
        for (int r : rows) {
          std::vector<torch::Tensor> inputs;
          for (const Product& p : products) inputs.push_back(torch::randn({r, p.weight.size(1)}));
          const double ms = BestMs(repeats, [&] {
            for (size_t i = 0; i < products.size(); ++i) products[i].packed[t].Apply(inputs[i]);
          });
          std::printf("| %s | %s | %d | %.3f | %.1f | %.1f | %.1f |\n", name.c_str(),
                      mnemo::model::WeightDtypeName(strip_types[t]).c_str(), r, ms,
                      2 * weights * r / ms / 1e6, weights * bytes / ms / 1e6, ms * 1000 / r);
        }
      }
    }
  }
  mnemo::model::SetBf16DotForTesting(true);  // back to the default
}

void BenchHostAttention(const mnemo::model::ModelConfig& c, const std::vector<int>& windows,
                        int sessions, int repeats) {
  const int64_t heads = c.n_heads, dh = c.d_head, capacity = c.mem_len + c.seg_len;
  const int64_t table_rows = c.MaxDistance() + 1;
  std::printf("\n## HostAttention: %d sessions x %lld heads (d_head %lld), one thread\n\n",
              sessions, static_cast<long long>(heads), static_cast<long long>(dh));
  std::printf("| kernel | rings | window | us per call | ns per (slot, head) | GB/s read |\n");
  std::printf("|---|---|---|---|---|---|\n");
  torch::Tensor u = torch::randn({heads, dh}), v = torch::randn({heads, dh});
  torch::Tensor table = torch::randn({heads, table_rows, dh});
  torch::Tensor queries = torch::randn({sessions, heads, dh});
  std::vector<torch::Tensor> keys, values, half_keys, half_values;
  for (int s = 0; s < sessions; ++s) {
    keys.push_back(torch::randn({heads, capacity, dh}));
    values.push_back(torch::randn({heads, capacity, dh}));
    half_keys.push_back(keys.back().to(torch::kHalf));
    half_values.push_back(values.back().to(torch::kHalf));
  }
  torch::Tensor y = torch::empty({sessions, heads * dh});
  for (CpuKernel kernel : mnemo::model::AvailableCpuKernels()) {
    mnemo::model::SetCpuKernelForTesting(kernel);
    for (const bool half : {false, true}) {
      for (int window : windows) {
        const int64_t w = std::min<int64_t>(window, capacity);
        // The newest w positions of each ring, at distances 0..w-1 (a raw window that wraps).
        std::vector<mnemo::model::RingSpan> spans;
        const int64_t start = (capacity - w / 2) % capacity;
        if (start + w > capacity) {
          spans.push_back({false, start, capacity - start});
          spans.push_back({false, 0, w - (capacity - start)});
        } else {
          spans.push_back({false, start, w});
        }
        std::vector<int64_t> distances(w);
        for (int64_t j = 0; j < w; ++j) distances[j] = (w - 1 - j) % table_rows;
        std::vector<mnemo::model::HostAttentionRow> rows;
        for (int s = 0; s < sessions; ++s) {
          mnemo::model::HostAttentionRow row;
          row.query = queries.data_ptr<float>() + s * heads * dh;
          row.query_head_stride = dh;
          row.ring_type = half ? RingType::kFloat16 : RingType::kFloat32;
          row.k_raw = half ? half_keys[s].data_ptr() : keys[s].data_ptr();
          row.v_raw = half ? half_values[s].data_ptr() : values[s].data_ptr();
          row.raw_capacity = capacity;
          row.spans = spans;
          row.distances = distances;
          rows.push_back(row);
        }
        mnemo::model::HostAttentionShape shape{heads, dh, table_rows,
                                               1.0f / std::sqrt(static_cast<float>(dh))};
        const double ms = BestMs(repeats, [&] {
          mnemo::model::HostAttention(u.data_ptr<float>(), v.data_ptr<float>(),
                                      table.data_ptr<float>(), shape, rows, y.data_ptr<float>());
        });
        // Per (slot, head): a key and a value (4 or 2 bytes each) and a float32 table row.
        const double items = static_cast<double>(sessions) * heads * w;
        const double bytes = items * dh * ((half ? 2 : 4) * 2 + 4);
        std::printf("| %s | %s | %lld | %.1f | %.1f | %.1f |\n",
                    mnemo::model::CpuKernelName(kernel).c_str(), half ? "float16" : "float32",
                    static_cast<long long>(w), ms * 1000, ms * 1e6 / items, bytes / ms / 1e6);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  mnemo::util::ConfigureCpuRuntime(argv);
  absl::SetProgramUsageMessage(
      "Times PackedLinear and HostAttention on one thread, for every instruction set this CPU "
      "runs, with a model's shapes.\n  mnemo-kernel-bench [--model DIR --rows 1,2,4,8,16 "
      "--windows 32,128,384]");
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<mnemo::model::ModelConfig> config =
      mnemo::model::LoadModelConfig(absl::GetFlag(FLAGS_model));
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
    return 1;
  }
  const std::vector<int> rows = ParseList(absl::GetFlag(FLAGS_rows), "rows");
  const std::vector<int> windows = ParseList(absl::GetFlag(FLAGS_windows), "windows");
  const int repeats = std::max(1, absl::GetFlag(FLAGS_repeats));
  if (absl::GetFlag(FLAGS_sessions) < 1) {
    std::fprintf(stderr, "--sessions must be at least 1\n");
    return 2;
  }
  at::set_num_threads(1);
  std::printf("# mnemo-kernel-bench: %s (default kernel: %s)\n", config->name.c_str(),
              mnemo::model::CpuKernelName(mnemo::model::CpuKernelInUse()).c_str());
  BenchPackedLinear(*config, rows, repeats);
  BenchHostAttention(*config, windows, absl::GetFlag(FLAGS_sessions), repeats);
  return 0;
}
