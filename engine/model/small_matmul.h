// PackedLinear: y = x Wᵀ + b for the few rows of a decode step, on the CPU in float32 (the
// weight's copy in float32 or float16), or with x and W in bfloat16.
//
// A decode step multiplies a handful of rows (one per session in a shard) by each weight
// matrix. OpenBLAS is tuned for large products: at 8 rows a 256x1024 product runs at ~40
// GFLOP/s on the 2-core development machine (it packs the whole matrix for every call), at 1
// row ~60, at 64 rows ~130. This kernel packs the weight once, when the model is loaded, as
// strips of 32 output columns, each a contiguous [K, 32] block, and streams it once per call,
// strip by strip in order (prefetching ahead), with the 8 x 32 outputs of a tile in registers
// (3 x 32 with AVX2, 1 x 32 with SSE only; cpu_kernels.h picks the instruction set): no packing
// per call and no horizontal sums.
//
// It is as fast for a prompt's segment (a few hundred rows: ~170 vs ~130 GFLOP/s on one core),
// so Forward uses it too. With more than one LibTorch intra-op thread, a product large enough
// to pay for waking them is split: by blocks of rows for 64 rows or more (a prompt), by strips
// of output columns for fewer (a decode step: each thread streams its share of the weight
// once, which is what a large model's memory-bound step needs).
//
// Same function as torch::linear up to the order of float additions. The copy remembers which
// tensors it was made from and their version counters: if they change in place afterwards
// (a test sharpening a loaded model, say), Current() turns false and callers use LibTorch.
// Thread-safety: Apply is const (concurrent calls are fine).
#ifndef MNEMO_ENGINE_MODEL_SMALL_MATMUL_H_
#define MNEMO_ENGINE_MODEL_SMALL_MATMUL_H_

#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace mnemo::model {

class PackedLinear {
 public:
  PackedLinear() = default;  // undefined: Apply must not be called
  // weight [N, K] (torch::nn::Linear's layout) or [N, ...] (a conv kernel [N, C, taps]: K =
  // C * taps, channel-major), bias [N] or undefined. Pass the parameter itself, not a view of it:
  // Current() recognises the tensor it was packed from. Packs only float32 CPU weights;
  // otherwise stays undefined (callers fall back to LibTorch). N is padded with zero columns to
  // a multiple of kColumns inside. strip_type kFloat16 keeps the copy as IEEE half (rounded to
  // nearest even), widened as the kernel reads it: half the bytes each call streams. Products
  // then agree with LibTorch's only for weights float16 holds exactly (Model rounds its
  // weights first, LoadOptions::weight_dtype); the bias stays float32. strip_type kBFloat16
  // keeps it as bfloat16 (rounded to nearest even) and rounds each row of x to bfloat16 too:
  // Apply then computes linear(bfloat16(x), bfloat16(W)) + b, the products exact and summed in
  // float32, with AVX512-BF16's dot product where the CPU has it (twice the multiply-adds per
  // instruction) — a different function from LibTorch's on the same tensors.
  PackedLinear(const torch::Tensor& weight, const torch::Tensor& bias,
               torch::ScalarType strip_type = torch::kFloat32);

  bool defined() const { return wt_.defined(); }
  // Whether this is still a copy of `weight` and `bias` as they are now (same tensors, not
  // modified in place since).
  bool Current(const torch::Tensor& weight, const torch::Tensor& bias) const;
  // Whether Apply takes x: float32 on the CPU, [..., K], outside autograd (inference only).
  bool Accepts(const torch::Tensor& x) const;
  // x [..., K] -> [..., N] float32.
  torch::Tensor Apply(const torch::Tensor& x) const;
  // Outputs [first, first + count) only: x [..., K] -> [..., count], reading only those
  // columns of the weight (a decode step's exited rows need just the key/value part of qkv).
  // `first` must be a multiple of kColumns.
  torch::Tensor Apply(const torch::Tensor& x, int64_t first, int64_t count) const;
  int64_t outputs() const { return outputs_; }
  // Appends the packed copy's tensors (when defined), for a caller that relocates them
  // (util::MoveToHugePages): Apply reads whatever tensors these point at.
  void AppendBuffers(std::vector<torch::Tensor*>& buffers);

  static constexpr int64_t kColumns = 32;  // outputs per tile

 private:
  // One strip per tile, contiguous: [N padded / kColumns, K, kColumns] float32 or float16, or
  // [N padded / kColumns, ceil(K / 2), kColumns, 2] bfloat16 (pairs of inputs).
  torch::Tensor wt_;
  int64_t inputs_ = 0;  // K
  torch::Tensor bias_;  // [N padded] contiguous, or undefined
  int64_t outputs_ = 0;  // N
  const void* weight_source_ = nullptr;  // the TensorImpl copied, and its version then
  const void* bias_source_ = nullptr;
  uint32_t weight_version_ = 0, bias_version_ = 0;
};

// linear(x) through `packed` when it takes x and is current, else the module.
torch::Tensor LinearForward(torch::nn::Linear& linear, const PackedLinear& packed,
                            const torch::Tensor& x);

}  // namespace mnemo::model

#endif  // MNEMO_ENGINE_MODEL_SMALL_MATMUL_H_
