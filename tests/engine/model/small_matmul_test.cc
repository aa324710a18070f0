// PackedLinear against torch::linear: every row count up to kMaxRows (full and partial blocks of
// 4), with and without bias, K not a multiple of anything, strided inputs; float16 and bfloat16
// strips against torch::linear on the rounded tensors; shapes it does not take are refused
// rather than computed wrongly.
#include "engine/model/small_matmul.h"

#include <ATen/Context.h>
#include <gtest/gtest.h>
#include <torch/types.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/cpu_kernels.h"
#include "tests/engine/model/cpu_kernel_test.h"

namespace mnemo::model {
namespace {

// Every test runs on the kernel this CPU picks; these two also on each other kernel it can run.
class PackedKernelTest : public OnEachCpuKernel {};

TEST_P(PackedKernelTest, MatchesTorchLinear) {
  at::manual_seed(3);
  for (int64_t k : {7, 256, 1024}) {
    for (int64_t n : {32, 96, 259, 768}) {
      torch::Tensor w = torch::randn({n, k}) / std::sqrt(static_cast<double>(k));
      torch::Tensor b = torch::randn({n});
      PackedLinear with_bias(w, b), without(w, torch::Tensor());
      for (int64_t m = 1; m <= 300; m += (m < 9 ? 1 : m < 40 ? 7 : 97)) {
        torch::Tensor x = torch::randn({m, k});
        ASSERT_TRUE(with_bias.Accepts(x));
        EXPECT_LT((with_bias.Apply(x) - torch::linear(x, w, b)).abs().max().item<float>(), 1e-4)
            << "m " << m << " k " << k << " n " << n;
        EXPECT_LT((without.Apply(x) - torch::linear(x, w)).abs().max().item<float>(), 1e-4)
            << "m " << m << " k " << k << " n " << n;
      }
    }
  }
}

TEST_P(PackedKernelTest, ComputesARangeOfOutputs) {
  at::manual_seed(5);
  torch::Tensor w = torch::randn({259, 40}) / 6.0;
  torch::Tensor b = torch::randn({259});
  PackedLinear packed(w, b);
  ASSERT_EQ(packed.outputs(), 259);
  for (int64_t m : {1, 3, 6, 17}) {
    torch::Tensor x = torch::randn({m, 40});
    torch::Tensor reference = torch::linear(x, w, b);
    // Whole tiles, a partial last tile ending in the padding, one ending inside the next tile,
    // a single output, and none.
    for (auto [first, count] : std::vector<std::pair<int64_t, int64_t>>{
             {0, 259}, {64, 195}, {32, 50}, {224, 1}, {96, 0}}) {
      torch::Tensor y = packed.Apply(x, first, count);
      ASSERT_EQ(y.sizes(), (std::vector<int64_t>{m, count}));
      if (count == 0) continue;
      EXPECT_LT((y - reference.narrow(1, first, count)).abs().max().item<float>(), 1e-5)
          << "m " << m << " outputs [" << first << ", " << first + count << ")";
    }
  }
  EXPECT_THROW(packed.Apply(torch::randn({2, 40}), 16, 32), c10::Error);   // not a tile start
  EXPECT_THROW(packed.Apply(torch::randn({2, 40}), 256, 32), c10::Error);  // past the outputs
}

TEST_P(PackedKernelTest, Float16StripsMatchTorchLinearOnRoundedWeights) {
  // Strips kept as float16 compute with the weight rounded to float16 (and nothing else
  // rounded): torch::linear with the rounded weight is the reference, the unrounded one is not.
  at::manual_seed(9);
  for (int64_t k : {7, 256}) {
    for (int64_t n : {32, 259}) {
      torch::Tensor w = torch::randn({n, k}) / std::sqrt(static_cast<double>(k));
      torch::Tensor b = torch::randn({n});
      const torch::Tensor rounded = w.to(torch::kFloat16).to(torch::kFloat32);
      PackedLinear half(w, b, torch::kFloat16);
      ASSERT_TRUE(half.defined());
      for (int64_t m : {1, 2, 3, 5, 8, 9, 17, 40}) {
        torch::Tensor x = torch::randn({m, k});
        const torch::Tensor y = half.Apply(x);
        EXPECT_LT((y - torch::linear(x, rounded, b)).abs().max().item<float>(), 1e-4)
            << "m " << m << " k " << k << " n " << n;
        if (k == 256) {
          EXPECT_GT((y - torch::linear(x, w, b)).abs().max().item<float>(), 1e-5)
              << "m " << m << ": the weight was not rounded";
        }
        if (n <= 32) continue;
        torch::Tensor part = half.Apply(x, 32, n - 32);
        EXPECT_LT((part - torch::linear(x, rounded, b).narrow(1, 32, n - 32))
                      .abs()
                      .max()
                      .item<float>(),
                  1e-4)
            << "m " << m << " outputs [32, " << n << ")";
      }
    }
  }
}

// BFloat16 strips on this kernel: with AVX512-BF16's dot product (where in use) and without it.
std::vector<bool> DotSettings() {
  std::vector<bool> settings{false};
  if (CpuHasBf16Dot() && CpuKernelInUse() == CpuKernel::kAvx512) settings.push_back(true);
  return settings;
}

TEST_P(PackedKernelTest, BFloat16StripsMatchTorchLinearOnRoundedInputsAndWeights) {
  // Strips kept as bfloat16 compute linear(bfloat16(x), bfloat16(W)) + b: the products exact,
  // summed in float32. torch::linear on both rounded is the reference (to float32 rounding of
  // the sums); with x unrounded it is not.
  at::manual_seed(10);
  for (const bool dot : DotSettings()) {
    const bool saved = SetBf16DotForTesting(dot);
    ASSERT_EQ(Bf16DotInUse(), dot);
    for (int64_t k : {7, 64, 256, 1024}) {
      for (int64_t n : {32, 259}) {
        torch::Tensor w = torch::randn({n, k}) / std::sqrt(static_cast<double>(k));
        torch::Tensor b = torch::randn({n});
        const torch::Tensor w16 = w.to(torch::kBFloat16).to(torch::kFloat32);
        PackedLinear packed(w, b, torch::kBFloat16);
        ASSERT_TRUE(packed.defined());
        for (int64_t m : {1, 2, 3, 5, 8, 9, 17, 40}) {
          torch::Tensor x = torch::randn({m, k});
          const torch::Tensor x16 = x.to(torch::kBFloat16).to(torch::kFloat32);
          const torch::Tensor expected = torch::linear(x16, w16, b);
          const torch::Tensor y = packed.Apply(x);
          EXPECT_LT((y - expected).abs().max().item<float>(), 1e-4)
              << "dot " << dot << " m " << m << " k " << k << " n " << n;
          if (k >= 64) {
            EXPECT_GT((y - torch::linear(x, w16, b)).abs().max().item<float>(), 1e-4)
                << "dot " << dot << " m " << m << ": the inputs were not rounded";
          }
          if (n <= 32) continue;
          torch::Tensor part = packed.Apply(x, 32, n - 32);
          EXPECT_LT((part - expected.narrow(1, 32, n - 32)).abs().max().item<float>(),
                    1e-4)
              << "dot " << dot << " m " << m << " outputs [32, " << n << ")";
        }
      }
    }
    SetBf16DotForTesting(saved);
  }
}

TEST_P(PackedKernelTest, BFloat16StripsRoundInputsToNearestEven) {
  // Inputs exactly halfway between two bfloat16 values round to the even one, as LibTorch's
  // .to(kBFloat16) does; an identity weight shows the rounded inputs themselves.
  const torch::Tensor eye = torch::eye(64);
  PackedLinear packed(eye, torch::Tensor(), torch::kBFloat16);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7 (to 1), 1 + 3 * 2^-8 halfway between 1 + 2^-7
  // and 1 + 2^-6 (up, to the even one); then negative, large and random values.
  torch::Tensor x = torch::randn({3, 64}) * 1e3;
  x[0][0] = 1.0f + 1.0f / 256;
  x[0][1] = 1.0f + 3.0f / 256;
  x[0][2] = -(1.0f + 1.0f / 256);
  x[0][63] = 3.0e38f;
  for (const bool dot : DotSettings()) {
    const bool saved = SetBf16DotForTesting(dot);
    EXPECT_TRUE(torch::equal(packed.Apply(x), x.to(torch::kBFloat16).to(torch::kFloat32)))
        << "dot " << dot;
    SetBf16DotForTesting(saved);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, PackedKernelTest, ::testing::ValuesIn(AvailableCpuKernels()),
                         CpuKernelTestName);

TEST(PackedLinearTest, DefaultsToTheFastestKernelAndSwitchesBack) {
  const std::vector<CpuKernel> kernels = AvailableCpuKernels();
  ASSERT_FALSE(kernels.empty());
  EXPECT_EQ(CpuKernelInUse(), kernels.back());
  const CpuKernel saved = SetCpuKernelForTesting(CpuKernel::kGeneric);
  EXPECT_EQ(CpuKernelInUse(), CpuKernel::kGeneric);
  EXPECT_EQ(SetCpuKernelForTesting(saved), CpuKernel::kGeneric);
  EXPECT_EQ(CpuKernelInUse(), kernels.back());
}

TEST(PackedLinearTest, TakesRowsOfAWiderTensor) {
  torch::Tensor w = torch::randn({64, 16});
  PackedLinear packed(w, torch::Tensor());
  torch::Tensor wide = torch::randn({5, 40});
  torch::Tensor x = wide.narrow(1, 3, 16);  // row stride 40
  EXPECT_LT((packed.Apply(x) - torch::linear(x, w)).abs().max().item<float>(), 1e-5);
}

TEST(PackedLinearTest, StripsAreFloat32Float16OrBFloat16) {
  torch::Tensor w = torch::randn({32, 8});
  EXPECT_THROW(PackedLinear(w, torch::Tensor(), torch::kFloat64), c10::Error);
  EXPECT_THROW(PackedLinear(w, torch::Tensor(), torch::kInt8), c10::Error);
}

TEST(PackedLinearTest, Bf16DotOnlyWhereTheCpuHasItAndOnAvx512) {
  EXPECT_EQ(Bf16DotInUse(), CpuHasBf16Dot());  // the default: the CPU's fastest kernel
  const bool saved = SetBf16DotForTesting(false);
  EXPECT_FALSE(Bf16DotInUse());
  SetBf16DotForTesting(saved);
  const CpuKernel kernel = SetCpuKernelForTesting(CpuKernel::kAvx2);
  EXPECT_FALSE(Bf16DotInUse());
  SetCpuKernelForTesting(kernel);
}

TEST(PackedLinearTest, RefusesWhatItCannotCompute) {
  EXPECT_FALSE(PackedLinear(torch::randn({32, 8}, torch::kFloat64), torch::Tensor()).defined());
  PackedLinear packed(torch::randn({32, 8}), torch::Tensor());
  ASSERT_TRUE(packed.defined());
  EXPECT_FALSE(packed.Accepts(torch::randn({2, 9})));                         // K differs
  torch::Tensor trained = torch::randn({2, 8}).requires_grad_();
  EXPECT_FALSE(packed.Accepts(trained));  // autograd needs the LibTorch op
  EXPECT_FALSE(packed.Accepts(torch::randn({2, 8}, torch::kFloat64)));
}

TEST(PackedLinearTest, TakesAnyLeadingShapeAndThreads) {
  at::manual_seed(4);
  torch::Tensor w = torch::randn({1024, 256}) / 16.0;
  PackedLinear packed(w, torch::Tensor());
  torch::Tensor x = torch::randn({2, 150, 256});  // a batch of segments, rows over two threads
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  torch::Tensor y = packed.Apply(x);
  at::set_num_threads(threads);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{2, 150, 1024}));
  EXPECT_LT((y - torch::linear(x, w)).abs().max().item<float>(), 1e-4);
}

TEST(PackedLinearTest, SplitsTheColumnsOfALargeProductOfFewRowsBetweenThreads) {
  // A decode-sized product (few rows) of a weight of several MiB: each of two threads takes a
  // share of the strips. Every strip type, the outputs and a range of them, a partial last
  // tile, and row counts on both sides of the column/row switch.
  at::manual_seed(6);
  const int64_t k = 768, n = 2 * 1024 + 40;  // 6.1 MiB in float32
  torch::Tensor w = torch::randn({n, k}) / std::sqrt(static_cast<double>(k));
  torch::Tensor b = torch::randn({n});
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  for (torch::ScalarType strips : {torch::kFloat32, torch::kFloat16, torch::kBFloat16}) {
    PackedLinear packed(w, b, strips);
    torch::Tensor rounded_w = w.to(strips).to(torch::kFloat32);
    for (int64_t m : {1, 5, 63, 64, 70}) {
      torch::Tensor x = torch::randn({m, k});
      torch::Tensor rounded_x = strips == torch::kBFloat16 ? x.to(strips).to(torch::kFloat32) : x;
      torch::Tensor reference = torch::linear(rounded_x, rounded_w, b);
      EXPECT_LT((packed.Apply(x) - reference).abs().max().item<float>(), 1e-3)
          << "m " << m << " strips " << strips;
      EXPECT_LT((packed.Apply(x, 1024, n - 1024) - reference.narrow(1, 1024, n - 1024))
                    .abs().max().item<float>(), 1e-3)
          << "m " << m << " strips " << strips;
    }
  }
  at::set_num_threads(threads);
}
TEST(PackedLinearTest, KeepsItsOwnCopyAndKnowsWhenTheWeightsChange) {
  torch::Tensor w = torch::randn({32, 8}), b = torch::randn({32});
  PackedLinear packed(w, b);
  EXPECT_TRUE(packed.Current(w, b));
  EXPECT_FALSE(packed.Current(w.clone(), b));  // another tensor
  EXPECT_FALSE(packed.Current(w, torch::Tensor()));
  torch::Tensor x = torch::randn({3, 8});
  torch::Tensor before = packed.Apply(x);
  w.mul_(2);
  EXPECT_FALSE(packed.Current(w, b));
  EXPECT_LT((packed.Apply(x) - before).abs().max().item<float>(), 1e-7);
  b.add_(1);
  EXPECT_FALSE(PackedLinear(w, torch::Tensor()).Current(w, b));
}

TEST(PackedLinearTest, PacksAConvKernelAsItsMatrixAndRecognisesIt) {
  // A conv kernel [N, C, taps] is the matrix [N, C * taps] (channel-major, then tap); Current()
  // must accept the kernel itself, or a model's compression would silently never use the pack.
  torch::Tensor kernel = torch::randn({48, 16, 4}), b = torch::randn({48});
  PackedLinear packed(kernel, b);
  ASSERT_TRUE(packed.defined());
  EXPECT_TRUE(packed.Current(kernel, b));
  torch::Tensor x = torch::randn({5, 64});
  ASSERT_TRUE(packed.Accepts(x));
  torch::Tensor expected = torch::addmm(b, x, kernel.view({48, 64}).t());
  EXPECT_LT((packed.Apply(x) - expected).abs().max().item<float>(), 1e-5);
}

TEST(PackedLinearTest, LinearForwardFollowsWeightsChangedInPlace) {
  torch::nn::Linear linear(8, 64);
  PackedLinear packed(linear->weight, linear->bias);
  torch::Tensor x = torch::randn({2, 8});
  torch::NoGradGuard no_grad;
  EXPECT_LT((LinearForward(linear, packed, x) - linear->forward(x)).abs().max().item<float>(), 1e-5);
  linear->weight.mul_(3);
  EXPECT_LT((LinearForward(linear, packed, x) - linear->forward(x)).abs().max().item<float>(), 1e-5);
}

}  // namespace
}  // namespace mnemo::model
