#include "engine/model/small_matmul.h"

#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "engine/model/cpu_kernels.h"
#include "engine/model/simd.h"

namespace mnemo::model {
namespace {

// How far ahead of the multiply-adds Tile asks for its weights: 8 KB (64 steps of a float32
// strip, 128 of a float16 one). The hardware's streamer alone left a 16-row product at 1.40 ms
// for the six layers; with this 1.20-1.29 (the kernel bench, float32 strips; 16 or 64 steps
// measured alike, 128 worse).
constexpr int64_t kPrefetchBytes = 8192;

// A bfloat16 (its bits) as a float: the high half of a float32.
inline float BFloat16Value(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return value;
}

// from[0, k) rounded to bfloat16 (to nearest even, as LibTorch's .to(kBFloat16)), in pairs:
// to[p] holds from[2p] in its low half and from[2p + 1] (0 past k) in its high half.
inline void ToBFloat16Pairs(const float* from, int64_t k, uint32_t* to) {
  const auto round = [](float value) -> uint32_t {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return (bits >> 16) | 0x40u;  // NaN stays quiet NaN
    return (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  };
  int64_t i = 0;
  for (; i + 1 < k; i += 2) to[i / 2] = round(from[i]) | (round(from[i + 1]) << 16);
  if (i < k) to[i / 2] = round(from[i]);
}

// The kernel (small_matmul_kernel.inc) once per instruction set (cpu_kernels.h), each with the
// most rows per tile its registers hold (a 32-column tile needs R x 32 / lanes accumulators,
// 32 / lanes weight vectors and a broadcast): 8 rows of V16 with AVX-512 (16 + 2 + 1 of 32
// registers), 3 rows of V8 with AVX2 + FMA (12 + 4 of 16; measured faster than 2 rows), 1 row
// of V4 with SSE. More rows would spill accumulators to the stack on every multiply-add.
// Float16 strips (kHalfRows): the same with AVX-512; 2 rows with AVX2, whose 3-row tiles ran
// 1.75x slower on float16 than on float32 strips (the widened weights need registers too).
// Bfloat16 strips (kPairRows) likewise, and once more for AVX512-BF16's dot product
// (MNEMO_BF16_DOT), used where the CPU has it (cpu_kernels.h: Bf16DotInUse).
// GCC 12 warns about the AVX-512 half conversion's pass-through operand (as in
// host_attention.cc).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC push_options
#pragma GCC target("avx512f")
namespace avx512 {
using V = simd::V16;
constexpr int kRows = 8;
constexpr int kHalfRows = 8;
constexpr int kPairRows = 8;
#include "engine/model/small_matmul_kernel.inc"
}  // namespace avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bf16")
namespace avx512bf16 {
using V = simd::V16;
constexpr int kRows = 8;
constexpr int kHalfRows = 8;
constexpr int kPairRows = 8;
#define MNEMO_BF16_DOT
#include "engine/model/small_matmul_kernel.inc"
#undef MNEMO_BF16_DOT
}  // namespace avx512bf16
#pragma GCC pop_options
#pragma GCC diagnostic pop

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {
using V = simd::V8;
constexpr int kRows = 3;
constexpr int kHalfRows = 2;
constexpr int kPairRows = 2;
#include "engine/model/small_matmul_kernel.inc"
}  // namespace avx2
#pragma GCC pop_options

namespace generic {
using V = simd::V4;
constexpr int kRows = 1;
constexpr int kHalfRows = 1;
constexpr int kPairRows = 1;
#include "engine/model/small_matmul_kernel.inc"
}  // namespace generic

template <typename W>
using MultiplyFn = void (*)(const float*, int64_t, int64_t, int64_t, int64_t, const W*, int64_t,
                            int64_t, const float*, float*, int64_t);

// Products of fewer rows than this split their columns between threads, not their rows.
constexpr int64_t kColumnSplitRows = 64;
// The least weight a thread streams when a product is split by columns: 512 KiB (~25-50 us
// at one core's bandwidth, against a few microseconds to wake a thread).
constexpr int64_t kMinSplitBytes = int64_t{512} << 10;

template <typename W>
MultiplyFn<W> KernelFunction(CpuKernel kernel) {
  if constexpr (std::is_same_v<W, uint32_t>) {
    if (Bf16DotInUse()) return avx512bf16::Multiply<W>;
  }
  switch (kernel) {
    case CpuKernel::kAvx512: return avx512::Multiply<W>;
    case CpuKernel::kAvx2: return avx2::Multiply<W>;
    default: return generic::Multiply<W>;
  }
}

}  // namespace

PackedLinear::PackedLinear(const torch::Tensor& weight, const torch::Tensor& bias,
                           torch::ScalarType strip_type) {
  TORCH_CHECK(strip_type == torch::kFloat32 || strip_type == torch::kFloat16 ||
                  strip_type == torch::kBFloat16,
              "PackedLinear: strips are float32, float16 or bfloat16, not ", strip_type);
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
  // Strip s holds outputs [32 s, 32 s + 32) for every input k: wt_[s][k][j] = W[32 s + j][k];
  // bfloat16 strips by pairs of inputs: wt_[s][p][j] = (W[32 s + j][2p], W[32 s + j][2p + 1]),
  // with a zero input column added to an odd K.
  inputs_ = matrix.size(1);
  const int64_t columns = strip_type == torch::kBFloat16 ? (inputs_ + 1) / 2 * 2 : inputs_;
  torch::Tensor padded_matrix = torch::zeros({padded, columns}, weight.options());
  padded_matrix.narrow(0, 0, outputs_).narrow(1, 0, inputs_).copy_(matrix);
  if (strip_type == torch::kBFloat16) {
    wt_ = padded_matrix.to(strip_type)
              .view({padded / kColumns, kColumns, columns / 2, 2})
              .transpose(1, 2)
              .contiguous();
  } else {
    wt_ = padded_matrix.view({padded / kColumns, kColumns, inputs_})
              .transpose(1, 2)
              .contiguous()
              .to(strip_type);
  }
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
         x.size(-1) == inputs_ && !(c10::GradMode::is_enabled() && x.requires_grad());
}

torch::Tensor PackedLinear::Apply(const torch::Tensor& x) const { return Apply(x, 0, outputs_); }

torch::Tensor PackedLinear::Apply(const torch::Tensor& x, int64_t first, int64_t count) const {
  TORCH_CHECK(first >= 0 && first % kColumns == 0 && count >= 0 && first + count <= outputs_,
              "PackedLinear: outputs [", first, ", ", first + count, ") of ", outputs_,
              " (the first must be a multiple of ", kColumns, ")");
  const int64_t k = inputs_;
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
  // Few rows (a decode step): the strips are split between LibTorch's intra-op threads, each
  // streaming its share of the weight once; a lone row of a 124M-parameter model is bound by
  // memory bandwidth, which one core does not saturate. Many rows (a prompt): blocks of 4 rows
  // are, each thread streaming the whole weight (compute-bound there). Either way a thread
  // takes at least a few hundred microseconds of work, so the bundled model's small products
  // stay on the calling thread.
  const int64_t strip_count = n / kColumns;
  const int64_t strip_bytes = (wt_.numel() / std::max<int64_t>(wt_.size(0), 1)) * wt_.element_size();
  const int64_t strip_grain = std::max<int64_t>(1, kMinSplitBytes / std::max<int64_t>(strip_bytes, 1));
  const bool by_columns = m < kColumnSplitRows && strip_count >= 2 * strip_grain &&
                          at::get_num_threads() > 1 && !at::in_parallel_region();
  const int64_t blocks = (m + 3) / 4;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 22) / std::max<int64_t>(8 * k * n, 1));
  // float, uint16_t (float16) or uint32_t (bfloat16 pairs) strips
  auto run = [&](const auto* strips) {
    using W = std::remove_const_t<std::remove_pointer_t<decltype(strips)>>;
    const MultiplyFn<W> multiply = KernelFunction<W>(CpuKernelInUse());
    if (by_columns) {
      at::parallel_for(0, strip_count, strip_grain, [&](int64_t begin, int64_t end) {
        multiply(xp, ldx, 0, m, k, strips, first + begin * kColumns, first + end * kColumns, bias,
                 yp + begin * kColumns, n);
      });
      return;
    }
    at::parallel_for(0, blocks, grain, [&](int64_t begin, int64_t end) {
      multiply(xp, ldx, begin * 4, std::min(end * 4, m), k, strips, first, first + n, bias, yp, n);
    });
  };
  if (wt_.scalar_type() == torch::kFloat16) {
    run(static_cast<const uint16_t*>(wt_.data_ptr()));
  } else if (wt_.scalar_type() == torch::kBFloat16) {
    run(static_cast<const uint32_t*>(wt_.data_ptr()));
  } else {
    run(wt_.data_ptr<float>());
  }
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
