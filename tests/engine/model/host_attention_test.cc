// HostAttention (the CPU decode-attention kernel) against the same function written with
// LibTorch ops: rings read in place through spans (a wrapped raw window is two runs; compressed
// slots follow), distances looked up in the position table, softmax, weighted values. Every
// test runs on each kernel this CPU has (cpu_kernels.h).
#include "engine/model/host_attention.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <ATen/Context.h>
#include <torch/types.h>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/cpu_kernels.h"
#include "tests/engine/model/cpu_kernel_test.h"

namespace mnemo::model {
namespace {

struct RowData {
  torch::Tensor k_raw, v_raw, k_cmp, v_cmp;  // [H, capacity, dh] float32 (what the kernel reads)
  // The same rounded to float16, as the kernel is given them when the row has float16 rings.
  torch::Tensor k_raw_half, v_raw_half, k_cmp_half, v_cmp_half;
  std::vector<RingSpan> spans;
  std::vector<int64_t> distances;
};

// y [H, dh] for one row, with LibTorch ops over the gathered visible slots; qu, qv [H, dh] the
// biased, scaled queries.
torch::Tensor Reference(const torch::Tensor& qu, const torch::Tensor& qv,
                        const torch::Tensor& table, const RowData& row) {  // table [H, D, dh]
  std::vector<torch::Tensor> keys, values;
  for (const RingSpan& span : row.spans) {
    const torch::Tensor& k = span.compressed ? row.k_cmp : row.k_raw;
    const torch::Tensor& v = span.compressed ? row.v_cmp : row.v_raw;
    keys.push_back(k.narrow(1, span.start, span.length));
    values.push_back(v.narrow(1, span.start, span.length));
  }
  torch::Tensor k = torch::cat(keys, 1), v = torch::cat(values, 1);  // [H, W, dh]
  torch::Tensor r = table.index_select(1, torch::tensor(row.distances, torch::kInt64));
  torch::Tensor scores = (qu.unsqueeze(1) * k).sum(-1) + (qv.unsqueeze(1) * r).sum(-1);  // [H, W]
  return (torch::softmax(scores, -1).unsqueeze(-1) * v).sum(1);                          // [H, dh]
}

// With `half`, two rows of every three have float16 rings (the reference reads the same values
// widened), the third float32 ones: one call mixes both, as a step whose sessions differ would.
void CheckAgainstReference(int64_t heads, int64_t dh, int64_t raw_capacity, int64_t cmp_capacity,
                           int rows_count, int64_t table_rows, bool half = false) {
  at::manual_seed(7);
  std::vector<RowData> rows(rows_count);
  for (int a = 0; a < rows_count; ++a) {
    RowData& row = rows[a];
    row.k_raw = torch::randn({heads, raw_capacity, dh});
    row.v_raw = torch::randn({heads, raw_capacity, dh});
    if (a % 2 == 0) {  // every other row has a compressed memory
      row.k_cmp = torch::randn({heads, cmp_capacity, dh});
      row.v_cmp = torch::randn({heads, cmp_capacity, dh});
    }
    if (half && a % 3 != 2) {
      const std::pair<torch::Tensor*, torch::Tensor*> rings[] = {{&row.k_raw, &row.k_raw_half},
                                                                 {&row.v_raw, &row.v_raw_half},
                                                                 {&row.k_cmp, &row.k_cmp_half},
                                                                 {&row.v_cmp, &row.v_cmp_half}};
      for (const auto& [ring, rounded] : rings) {
        if (!ring->defined()) continue;
        *rounded = ring->to(torch::kFloat16);
        *ring = rounded->to(torch::kFloat32);
      }
    }
    // Row a sees a window that wraps around the raw ring when a is odd.
    const int64_t length = 1 + (a * 7) % raw_capacity;
    const int64_t start = a % 2 == 1 ? raw_capacity - length / 2 : 0;
    if (start + length > raw_capacity) {
      row.spans.push_back({false, start, raw_capacity - start});
      row.spans.push_back({false, 0, length - (raw_capacity - start)});
    } else {
      row.spans.push_back({false, start, length});
    }
    if (row.k_cmp.defined()) row.spans.push_back({true, 1, cmp_capacity - 1});
    for (const RingSpan& span : row.spans) {
      for (int64_t j = 0; j < span.length; ++j) {
        row.distances.push_back((j * 5 + a + (span.compressed ? 40 : 0)) % table_rows);
      }
    }
  }
  // Raw queries [A, H, dh] as a strided view (a qkv-like [A, 3, H, dh] product's first third).
  torch::Tensor qkv = torch::randn({rows_count, 3, heads, dh});
  torch::Tensor q = qkv.select(1, 0);
  torch::Tensor u = torch::randn({heads, dh}), v = torch::randn({heads, dh});
  const float scale = 0.25f;
  torch::Tensor qu = ((q + u) * scale).transpose(0, 1);  // [H, A, dh] for the reference
  torch::Tensor qv = ((q + v) * scale).transpose(0, 1);
  torch::Tensor table = torch::randn({heads, table_rows, dh});
  std::vector<HostAttentionRow> views;
  for (int a = 0; a < rows_count; ++a) {
    RowData& row = rows[a];
    HostAttentionRow view;
    view.query = q.data_ptr<float>() + a * q.stride(0);
    view.query_head_stride = q.stride(1);
    const bool half_row = row.k_raw_half.defined();
    view.ring_type = half_row ? RingType::kFloat16 : RingType::kFloat32;
    view.k_raw = (half_row ? row.k_raw_half : row.k_raw).data_ptr();
    view.v_raw = (half_row ? row.v_raw_half : row.v_raw).data_ptr();
    view.raw_capacity = raw_capacity;
    if (row.k_cmp.defined()) {
      view.k_cmp = (half_row ? row.k_cmp_half : row.k_cmp).data_ptr();
      view.v_cmp = (half_row ? row.v_cmp_half : row.v_cmp).data_ptr();
      view.cmp_capacity = cmp_capacity;
    }
    view.spans = row.spans;
    view.distances = row.distances;
    views.push_back(view);
  }
  torch::Tensor y = torch::full({rows_count, heads * dh}, 99.0f);  // [A, H * dh]
  HostAttention(u.data_ptr<float>(), v.data_ptr<float>(), table.data_ptr<float>(),
                HostAttentionShape{heads, dh, table_rows, scale}, views, y.data_ptr<float>());
  for (int a = 0; a < rows_count; ++a) {
    torch::Tensor expected = Reference(qu.select(1, a), qv.select(1, a), table, rows[a]);
    EXPECT_LT((y[a].view({heads, dh}) - expected).abs().max().item<float>(), 1e-5) << "row " << a;
  }
}

class HostAttentionTest : public OnEachCpuKernel {};

TEST_P(HostAttentionTest, MatchesLibTorchOnOneSmallRow) {
  CheckAgainstReference(/*heads=*/2, /*dh=*/16, /*raw=*/8, /*cmp=*/4, /*rows=*/1, /*D=*/50);
}

TEST_P(HostAttentionTest, MatchesLibTorchWithTailsWrappedRingsAndManyRows) {
  // d_head 12 and 20 exercise the vector loops' tails (shorter than a vector, and after one);
  // 33 rows and long windows take the parallel path; windows of 1 to 96 slots end in every
  // remainder of a block of slots.
  CheckAgainstReference(/*heads=*/3, /*dh=*/12, /*raw=*/96, /*cmp=*/24, /*rows=*/33, /*D=*/120);
  CheckAgainstReference(/*heads=*/2, /*dh=*/20, /*raw=*/40, /*cmp=*/7, /*rows=*/9, /*D=*/64);
}

TEST_P(HostAttentionTest, ARowThatSeesNothingGetsZeros) {
  // Not reachable from decode (a query always sees its own position), but the contract says
  // zeros rather than whatever was in y; the other row is unaffected.
  const int64_t heads = 2, dh = 20, capacity = 8, table_rows = 10;
  at::manual_seed(5);
  torch::Tensor k = torch::randn({heads, capacity, dh}), v = torch::randn({heads, capacity, dh});
  torch::Tensor q = torch::randn({2, heads, dh}), u = torch::randn({heads, dh}),
                vb = torch::randn({heads, dh}), table = torch::randn({heads, table_rows, dh});
  const std::vector<RingSpan> spans{{false, 0, 3}};
  const std::vector<int64_t> distances{2, 1, 0};
  std::vector<HostAttentionRow> views(2);
  for (int a = 0; a < 2; ++a) {
    views[a].query = q.data_ptr<float>() + a * heads * dh;
    views[a].query_head_stride = dh;
    views[a].k_raw = k.data_ptr<float>();
    views[a].v_raw = v.data_ptr<float>();
    views[a].raw_capacity = capacity;
  }
  views[1].spans = spans;
  views[1].distances = distances;
  torch::Tensor y = torch::full({2, heads * dh}, 99.0f);
  HostAttention(u.data_ptr<float>(), vb.data_ptr<float>(), table.data_ptr<float>(),
                HostAttentionShape{heads, dh, table_rows, 0.5f}, views, y.data_ptr<float>());
  EXPECT_EQ(y[0].abs().max().item<float>(), 0.0f);
  RowData row{k, v, torch::Tensor(), torch::Tensor(), {}, {}, {}, {}, spans, distances};
  torch::Tensor expected = Reference(((q[1] + u) * 0.5f), ((q[1] + vb) * 0.5f), table, row);
  EXPECT_LT((y[1].view({heads, dh}) - expected).abs().max().item<float>(), 1e-5);
}

TEST_P(HostAttentionTest, SameResultWithOneThreadAndWithTwo) {
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  CheckAgainstReference(4, 64, 128, 32, 16, 300);
  at::set_num_threads(2);
  CheckAgainstReference(4, 64, 128, 32, 16, 300);
  at::set_num_threads(threads);
}

TEST_P(HostAttentionTest, Float16RingsAreReadAsTheirWidenedValues) {
  // Tails, wrapped rings, compressed slots, many rows (the parallel path), and rows of both
  // ring types in one call; then the serving shape (d_head 64).
  CheckAgainstReference(3, 12, 96, 24, 33, 120, /*half=*/true);
  CheckAgainstReference(2, 20, 40, 7, 9, 64, /*half=*/true);
  CheckAgainstReference(4, 64, 128, 32, 16, 300, /*half=*/true);
}

TEST_P(HostAttentionTest, FloatsToHalvesRoundsAsLibTorchDoes) {
  // Ties, values below float16's normal range (subnormal results, and ones that round to 0),
  // beyond its largest finite value, infinities and NaN; lengths that leave vector tails.
  at::manual_seed(3);
  torch::Tensor x = torch::cat({torch::randn({997}) * 4.0f, torch::randn({64}) * 1e-6f,
                                torch::randn({64}) * 1e-9f, torch::randn({32}) * 1e5f,
                                torch::tensor({1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 65504.0f,
                                               65520.0f, -0.0f, 6.0e-8f, 2.9e-8f,
                                               std::numeric_limits<float>::infinity(),
                                               -std::numeric_limits<float>::infinity()})});
  const torch::Tensor expected = x.to(torch::kFloat16);
  for (int64_t n : {x.numel(), int64_t{1}, int64_t{15}, int64_t{17}}) {
    torch::Tensor got = torch::full({n}, 7.0f).to(torch::kFloat16);
    FloatsToHalves(x.data_ptr<float>(), reinterpret_cast<uint16_t*>(got.data_ptr<at::Half>()), n);
    EXPECT_TRUE(
        torch::equal(got.view(torch::kInt16), expected.narrow(0, 0, n).view(torch::kInt16)))
        << n << " values";
  }
  float nan = std::numeric_limits<float>::quiet_NaN();
  uint16_t half = 0;
  FloatsToHalves(&nan, &half, 1);
  EXPECT_EQ(half & 0x7c00, 0x7c00);
  EXPECT_NE(half & 0x03ff, 0);
}

INSTANTIATE_TEST_SUITE_P(Kernels, HostAttentionTest, ::testing::ValuesIn(AvailableCpuKernels()),
                         CpuKernelTestName);

}  // namespace
}  // namespace mnemo::model
