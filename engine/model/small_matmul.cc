#include "engine/model/small_matmul.h"

#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <vector>

#include "engine/model/cpu_kernels.h"
#include "engine/model/simd.h"

namespace mnemo::model {
namespace {

using simd::Load;
using simd::Store;
using simd::V16;
using simd::V4;
using simd::V8;

// How far ahead of the multiply-adds Tile asks for its weights: 64 steps of 128 bytes (8 KB).
// The hardware's streamer alone left a 16-row product at 1.40 ms for the six layers; with this
// 1.20-1.29 (the kernel bench; 16 or 64 steps measured alike, 128 worse).
constexpr int64_t kPrefetchSteps = 64;

// Rows [0, R) of x (row stride ldx) times one strip of the packed weight (w: [K, 32],
// contiguous), plus bias (32 values, or nullptr), into the 32 columns at y (row stride ldy),
// with the R x 32 outputs in vectors V.
template <typename V, int R>
inline __attribute__((always_inline)) void Tile(const float* x, int64_t ldx, int64_t k_size,
                                                const float* w, const float* bias, float* y,
                                                int64_t ldy) {
  constexpr int kLanes = simd::kLanes<V>;
  constexpr int kVectors = PackedLinear::kColumns / kLanes;
  V acc[R][kVectors];
  const V zero = {};
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int j = 0; j < kVectors; ++j) acc[r][j] = bias != nullptr ? Load<V>(bias + j * kLanes) : zero;
  }
  for (int64_t k = 0; k < k_size; ++k, w += PackedLinear::kColumns) {
    // The two lines kPrefetchSteps rows ahead (past the strip's end: the next strip's, which
    // the next tile reads; prefetching never faults).
    __builtin_prefetch(w + kPrefetchSteps * PackedLinear::kColumns);
    __builtin_prefetch(w + kPrefetchSteps * PackedLinear::kColumns + 16);
    V wk[kVectors];
#pragma GCC unroll 8
    for (int j = 0; j < kVectors; ++j) wk[j] = Load<V>(w + j * kLanes);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float xv = x[r * ldx + k];
#pragma GCC unroll 8
      for (int j = 0; j < kVectors; ++j) acc[r][j] += xv * wk[j];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int j = 0; j < kVectors; ++j) Store<V>(y + r * ldy + j * kLanes, acc[r][j]);
  }
}

// Tile<V, rows> for 1 <= rows <= R.
template <typename V, int R>
inline __attribute__((always_inline)) void TileUpTo(int64_t rows, const float* x, int64_t ldx,
                                                    int64_t k_size, const float* w,
                                                    const float* bias, float* y, int64_t ldy) {
  if constexpr (R == 1) {
    Tile<V, 1>(x, ldx, k_size, w, bias, y, ldy);
  } else if (rows == R) {
    Tile<V, R>(x, ldx, k_size, w, bias, y, ldy);
  } else {
    TileUpTo<V, R - 1>(rows, x, ldx, k_size, w, bias, y, ldy);
  }
}

// Rows [m_begin, m_size) of x (m_begin a multiple of 4) times columns [n_begin, n_end) of the
// packed weight (strips [K, 32] one after another; both bounds multiples of 32), into
// y [m_size, n_end - n_begin], in blocks of kRows rows. Strips outside, rows inside: each strip
// (32-128 KB, contiguous) is read from memory once, in order, and then from L1/L2 by the other
// row blocks, so a call streams the weight once however many rows it has.
template <typename V, int kRows>
inline __attribute__((always_inline)) void MultiplyBlocks(
    const float* x, int64_t ldx, int64_t m_begin, int64_t m_size, int64_t k_size,
    const float* strips, int64_t n_begin, int64_t n_end, const float* bias, float* y) {
  const int64_t ldy = n_end - n_begin;
  for (int64_t n0 = n_begin; n0 < n_end; n0 += PackedLinear::kColumns) {
    const float* b = bias != nullptr ? bias + n0 : nullptr;
    const float* strip = strips + n0 * k_size;  // strip n0 / 32 of [K, 32] floats
    for (int64_t m = m_begin; m < m_size; m += kRows) {
      TileUpTo<V, kRows>(std::min<int64_t>(kRows, m_size - m), x + m * ldx, ldx, k_size, strip, b,
                         y + m * ldy + (n0 - n_begin), ldy);
    }
  }
}

// Three kernels, each with the most rows per block its registers hold (a 32-column tile needs
// R x 32 / lanes accumulators, 32 / lanes weight vectors and a broadcast): 8 rows of V16 with
// AVX-512 (16 + 2 + 1 of 32 registers), 3 rows of V8 with AVX2 + FMA (12 + 4 of 16; measured
// faster than 2 rows), 1 row of V4 with SSE. More rows would spill accumulators to the stack on
// every multiply-add.
__attribute__((target("avx512f"))) void MultiplyAvx512(
    const float* x, int64_t ldx, int64_t m_begin, int64_t m_size, int64_t k_size,
    const float* strips, int64_t n_begin, int64_t n_end, const float* bias, float* y) {
  MultiplyBlocks<V16, 8>(x, ldx, m_begin, m_size, k_size, strips, n_begin, n_end, bias, y);
}

__attribute__((target("avx2,fma"))) void MultiplyAvx2(
    const float* x, int64_t ldx, int64_t m_begin, int64_t m_size, int64_t k_size,
    const float* strips, int64_t n_begin, int64_t n_end, const float* bias, float* y) {
  MultiplyBlocks<V8, 3>(x, ldx, m_begin, m_size, k_size, strips, n_begin, n_end, bias, y);
}

void MultiplyGeneric(const float* x, int64_t ldx, int64_t m_begin, int64_t m_size,
                     int64_t k_size, const float* strips, int64_t n_begin, int64_t n_end,
                     const float* bias, float* y) {
  MultiplyBlocks<V4, 1>(x, ldx, m_begin, m_size, k_size, strips, n_begin, n_end, bias, y);
}

using MultiplyFn = void (*)(const float*, int64_t, int64_t, int64_t, int64_t, const float*,
                            int64_t, int64_t, const float*, float*);

MultiplyFn KernelFunction(CpuKernel kernel) {
  switch (kernel) {
    case CpuKernel::kAvx512: return MultiplyAvx512;
    case CpuKernel::kAvx2: return MultiplyAvx2;
    default: return MultiplyGeneric;
  }
}

}  // namespace

PackedLinear::PackedLinear(const torch::Tensor& weight, const torch::Tensor& bias) {
  if (!weight.defined() || weight.dim() < 2 || !weight.device().is_cpu() ||
      weight.scalar_type() != torch::kFloat32) {
    return;
  }
  weight_source_ = weight.unsafeGetTensorImpl();
  weight_version_ = weight._version();
  if (bias.defined()) {
    bias_source_ = bias.unsafeGetTensorImpl();
    bias_version_ = bias._version();
  }
  c10::InferenceMode inference;
  outputs_ = weight.size(0);
  const torch::Tensor matrix = weight.detach().reshape({outputs_, -1});  // [N, K]
  const int64_t padded = (outputs_ + kColumns - 1) / kColumns * kColumns;
  // Strip s holds outputs [32 s, 32 s + 32) for every input k: wt_[s][k][j] = W[32 s + j][k].
  const int64_t inputs = matrix.size(1);
  torch::Tensor padded_matrix = torch::zeros({padded, inputs}, weight.options());  // [N padded, K]
  padded_matrix.narrow(0, 0, outputs_).copy_(matrix);
  wt_ = padded_matrix.view({padded / kColumns, kColumns, inputs}).transpose(1, 2).contiguous();
  if (bias.defined()) {
    bias_ = torch::zeros({padded}, bias.options());
    bias_.narrow(0, 0, outputs_).copy_(bias.detach());
  }
}

bool PackedLinear::Current(const torch::Tensor& weight, const torch::Tensor& bias) const {
  if (!defined() || weight.unsafeGetTensorImpl() != weight_source_ ||
      weight._version() != weight_version_) {
    return false;
  }
  if (!bias.defined()) return bias_source_ == nullptr;
  return bias.unsafeGetTensorImpl() == bias_source_ && bias._version() == bias_version_;
}

bool PackedLinear::Accepts(const torch::Tensor& x) const {
  return defined() && x.dim() >= 1 && x.device().is_cpu() && x.scalar_type() == torch::kFloat32 &&
         x.size(-1) == wt_.size(1) && !(c10::GradMode::is_enabled() && x.requires_grad());
}

torch::Tensor PackedLinear::Apply(const torch::Tensor& x) const { return Apply(x, 0, outputs_); }

torch::Tensor PackedLinear::Apply(const torch::Tensor& x, int64_t first, int64_t count) const {
  TORCH_CHECK(first >= 0 && first % kColumns == 0 && count >= 0 && first + count <= outputs_,
              "PackedLinear: outputs [", first, ", ", first + count, ") of ", outputs_,
              " (the first must be a multiple of ", kColumns, ")");
  const int64_t k = wt_.size(1);
  // Whole tiles: the last one may reach into the zero padding (or the next outputs), dropped.
  const int64_t n = (count + kColumns - 1) / kColumns * kColumns;
  torch::Tensor rows = x.reshape({-1, k});
  if (rows.stride(1) != 1) rows = rows.contiguous();
  const int64_t m = rows.size(0);
  torch::Tensor y = torch::empty({m, n}, rows.options());
  const float* xp = rows.data_ptr<float>();
  const int64_t ldx = rows.stride(0);
  const float* bias = bias_.defined() ? bias_.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  // Blocks of 4 rows; a thread takes at least ~4 MFLOP of them (a few hundred microseconds),
  // so decode-sized products stay on the calling thread.
  const int64_t blocks = (m + 3) / 4;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 22) / std::max<int64_t>(8 * k * n, 1));
  const MultiplyFn multiply = KernelFunction(CpuKernelInUse());
  at::parallel_for(0, blocks, grain, [&](int64_t begin, int64_t end) {
    multiply(xp, ldx, begin * 4, std::min(end * 4, m), k, wt_.data_ptr<float>(), first,
             first + n, bias, yp);
  });
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = count;
  if (count != n) y = y.narrow(1, 0, count);  // the rest of the last tile dropped (a strided view)
  return y.view(shape);
}

void PackedLinear::AppendBuffers(std::vector<torch::Tensor*>& buffers) {
  if (wt_.defined()) buffers.push_back(&wt_);
  if (bias_.defined()) buffers.push_back(&bias_);
}

torch::Tensor LinearForward(torch::nn::Linear& linear, const PackedLinear& packed,
                            const torch::Tensor& x) {
  return packed.Accepts(x) && packed.Current(linear->weight, linear->bias) ? packed.Apply(x)
                                                                          : linear->forward(x);
}

}  // namespace mnemo::model
