#include "engine/model/small_matmul.h"

#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cstring>
#include <vector>

// The vector type never crosses a call boundary (everything below is inlined into Multiply), so
// GCC's note that its calling convention depends on -mavx512f does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace mnemo::model {
namespace {

// Sixteen floats; the compiler maps it to one AVX-512 register, two AVX2 ones, or four SSE.
typedef float V16 __attribute__((vector_size(64)));

inline __attribute__((always_inline)) V16 Load(const float* p) {
  V16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline __attribute__((always_inline)) void Store(float* p, V16 v) {
  std::memcpy(p, &v, sizeof(v));
}

// Rows [0, R) of x (R <= 8, row stride ldx) times the 32 columns of wt that start at w (row
// stride ldw), plus bias (32 values, or nullptr), into the 32 columns at y (row stride ldy).
template <int R>
inline __attribute__((always_inline)) void Tile(const float* x, int64_t ldx, int64_t k_size,
                                                const float* w, int64_t ldw, const float* bias,
                                                float* y, int64_t ldy) {
  V16 acc[R][2];
  const V16 zero = {};
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    acc[r][0] = bias != nullptr ? Load(bias) : zero;
    acc[r][1] = bias != nullptr ? Load(bias + 16) : zero;
  }
  for (int64_t k = 0; k < k_size; ++k, w += ldw) {
    const V16 w0 = Load(w), w1 = Load(w + 16);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float xv = x[r * ldx + k];
      acc[r][0] += xv * w0;
      acc[r][1] += xv * w1;
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    Store(y + r * ldy, acc[r][0]);
    Store(y + r * ldy + 16, acc[r][1]);
  }
}

// Tile<rows> for 1 <= rows <= R.
template <int R>
inline __attribute__((always_inline)) void TileUpTo(int64_t rows, const float* x, int64_t ldx,
                                                    int64_t k_size, const float* w, int64_t ldw,
                                                    const float* bias, float* y, int64_t ldy) {
  if constexpr (R == 1) {
    Tile<1>(x, ldx, k_size, w, ldw, bias, y, ldy);
  } else if (rows == R) {
    Tile<R>(x, ldx, k_size, w, ldw, bias, y, ldy);
  } else {
    TileUpTo<R - 1>(rows, x, ldx, k_size, w, ldw, bias, y, ldy);
  }
}

// Rows [m_begin, m_size) of x (m_begin a multiple of 4) times columns [n_begin, n_end) of wt
// [K, ldw] (both multiples of 32), into y [m_size, n_end - n_begin], in blocks of kRows rows.
// Column strips outside, rows inside: each strip of the weight ([K, 32], 32-128 KB) is read from
// memory once and then from L1/L2 by the other row blocks, so a call streams the weight once
// however many rows it has.
template <int kRows>
inline __attribute__((always_inline)) void MultiplyBlocks(
    const float* x, int64_t ldx, int64_t m_begin, int64_t m_size, int64_t k_size,
    const float* wt, int64_t ldw, int64_t n_begin, int64_t n_end, const float* bias, float* y) {
  const int64_t ldy = n_end - n_begin;
  for (int64_t n0 = n_begin; n0 < n_end; n0 += PackedLinear::kColumns) {
    const float* b = bias != nullptr ? bias + n0 : nullptr;
    for (int64_t m = m_begin; m < m_size; m += kRows) {
      TileUpTo<kRows>(std::min<int64_t>(kRows, m_size - m), x + m * ldx, ldx, k_size, wt + n0, ldw,
                      b, y + m * ldy + (n0 - n_begin), ldy);
    }
  }
}

// 4-row blocks: their 8 accumulators and 2 weight vectors fit AVX2's 16 registers.
__attribute__((target_clones("avx2", "default"))) void Multiply(
    const float* x, int64_t ldx, int64_t m_begin, int64_t m_size, int64_t k_size,
    const float* wt, int64_t ldw, int64_t n_begin, int64_t n_end, const float* bias, float* y) {
  MultiplyBlocks<4>(x, ldx, m_begin, m_size, k_size, wt, ldw, n_begin, n_end, bias, y);
}

// 8-row blocks where AVX-512 has the registers (16 accumulators and 2 weight vectors of its 32):
// half the weight loads per multiply-add.
__attribute__((target("avx512f"))) void MultiplyAvx512(
    const float* x, int64_t ldx, int64_t m_begin, int64_t m_size, int64_t k_size,
    const float* wt, int64_t ldw, int64_t n_begin, int64_t n_end, const float* bias, float* y) {
  MultiplyBlocks<8>(x, ldx, m_begin, m_size, k_size, wt, ldw, n_begin, n_end, bias, y);
}

const bool kHasAvx512 = __builtin_cpu_supports("avx512f");

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
  wt_ = torch::zeros({matrix.size(1), padded}, weight.options());  // [K, N padded], its own copy
  wt_.narrow(1, 0, outputs_).copy_(matrix.t());
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
         x.size(-1) == wt_.size(0) && !(c10::GradMode::is_enabled() && x.requires_grad());
}

torch::Tensor PackedLinear::Apply(const torch::Tensor& x) const { return Apply(x, 0, outputs_); }

torch::Tensor PackedLinear::Apply(const torch::Tensor& x, int64_t first, int64_t count) const {
  TORCH_CHECK(first >= 0 && first % kColumns == 0 && count >= 0 && first + count <= outputs_,
              "PackedLinear: outputs [", first, ", ", first + count, ") of ", outputs_,
              " (the first must be a multiple of ", kColumns, ")");
  const int64_t k = wt_.size(0);
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
  at::parallel_for(0, blocks, grain, [&](int64_t begin, int64_t end) {
    (kHasAvx512 ? MultiplyAvx512 : Multiply)(xp, ldx, begin * 4, std::min(end * 4, m), k,
                                             wt_.data_ptr<float>(), wt_.size(1), first,
                                             first + n, bias, yp);
  });
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = count;
  if (count != n) y = y.narrow(1, 0, count);  // the rest of the last tile dropped (a strided view)
  return y.view(shape);
}

torch::Tensor LinearForward(torch::nn::Linear& linear, const PackedLinear& packed,
                            const torch::Tensor& x) {
  return packed.Accepts(x) && packed.Current(linear->weight, linear->bias) ? packed.Apply(x)
                                                                          : linear->forward(x);
}

}  // namespace mnemo::model
