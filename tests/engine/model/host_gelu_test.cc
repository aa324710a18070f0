// GeluInPlace against the exact GELU computed in double (x/2 * erfc(-x / sqrt 2): the 1 + erf
// form loses every digit to cancellation for x below about -6, even in double), on each
// kernel this CPU runs: a dense sweep of [-12, 20], random values, every tail length, NaN. Gelu
// computes on the host only where it may (float32, contiguous, CPU, no autograd) and matches
// torch::gelu, gradients included, where it may not.
#include "engine/model/host_gelu.h"

#include <ATen/Context.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "tests/engine/model/cpu_kernel_test.h"

namespace mnemo::model {
namespace {

// The largest |got - exact| / max(|exact|, 1e-30) over x, and the x where it is.
std::pair<double, double> WorstRelativeError(const torch::Tensor& x) {
  std::vector<float> got(x.data_ptr<float>(), x.data_ptr<float>() + x.numel());
  GeluInPlace(got.data(), x.numel());
  std::pair<double, double> worst = {0.0, 0.0};
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = x.data_ptr<float>()[i];
    const double exact = 0.5 * v * std::erfc(-v / std::sqrt(2.0));
    const double error = std::abs(got[i] - exact) / std::max(std::abs(exact), 1e-30);
    if (error > worst.first) worst = {error, v};
  }
  return worst;
}

class HostGeluTest : public OnEachCpuKernel {};

TEST_P(HostGeluTest, MatchesExactGeluToUnderAMillionth) {
  at::manual_seed(5);
  // Down to x = -12 the result is a normal float (erfc(8.5) ~ 1e-33); the sweep stops there.
  for (const torch::Tensor& x : {torch::linspace(-12.0, 20.0, 64001), torch::randn({50000}) * 3.0}) {
    const auto [error, where] = WorstRelativeError(x);
    EXPECT_LT(error, 1e-6) << "at x = " << where;  // 4.3e-7 at worst on this machine
  }
}

TEST_P(HostGeluTest, FarNegativeIsZeroAndEveryTailLengthIsComputed) {
  std::vector<float> far = {-20.0f, -40.0f, -1e6f};
  GeluInPlace(far.data(), static_cast<int64_t>(far.size()));
  for (float v : far) EXPECT_LE(std::abs(v), 1e-36f);
  for (int64_t n = 1; n <= 40; ++n) {
    torch::Tensor x = torch::randn({n});
    torch::Tensor got = x.clone();
    GeluInPlace(got.data_ptr<float>(), n);
    EXPECT_LT((got - torch::gelu(x)).abs().max().item<float>(), 1e-6) << "n " << n;
  }
  std::vector<float> nan = {1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f};
  GeluInPlace(nan.data(), 3);
  EXPECT_TRUE(std::isnan(nan[1]));
  EXPECT_FALSE(std::isnan(nan[0]) || std::isnan(nan[2]));
}

INSTANTIATE_TEST_SUITE_P(Kernels, HostGeluTest, ::testing::ValuesIn(AvailableCpuKernels()),
                         CpuKernelTestName);

TEST(GeluTest, ComputesInPlaceOnlyWhereItMay) {
  at::manual_seed(6);
  {
    c10::InferenceMode inference;
    torch::Tensor x = torch::randn({8, 1024});
    const torch::Tensor expected = torch::gelu(x);
    ASSERT_TRUE(GeluOnHost(x));
    torch::Tensor y = Gelu(x);
    EXPECT_EQ(y.data_ptr(), x.data_ptr());  // in place
    EXPECT_LT((y - expected).abs().max().item<float>(), 1e-6);
    // A strided view and float64 go through LibTorch, leaving the input alone.
    torch::Tensor wide = torch::randn({8, 40});
    torch::Tensor strided = wide.narrow(1, 3, 30);
    const torch::Tensor before = strided.clone();
    EXPECT_FALSE(GeluOnHost(strided));
    EXPECT_LT((Gelu(strided) - torch::gelu(before)).abs().max().item<float>(), 1e-6);
    EXPECT_TRUE(torch::equal(strided, before));
    EXPECT_FALSE(GeluOnHost(torch::randn({4}, torch::kFloat64)));
    // A prompt's rows: oneDNN (faster there), a new tensor.
    torch::Tensor prompt = torch::randn({64, 1024});
    EXPECT_FALSE(GeluOnHost(prompt));
    torch::Tensor out = Gelu(prompt);
    EXPECT_NE(out.data_ptr(), prompt.data_ptr());
    EXPECT_LT((out - torch::gelu(prompt)).abs().max().item<float>(), 1e-6);
  }
  // Under autograd: torch::gelu, and its gradient.
  torch::Tensor x = torch::randn({5, 7}, torch::requires_grad());
  EXPECT_FALSE(GeluOnHost(x));
  Gelu(x).sum().backward();
  torch::Tensor reference = x.detach().clone().requires_grad_(true);
  torch::gelu(reference).sum().backward();
  EXPECT_TRUE(torch::allclose(x.grad(), reference.grad()));
}

}  // namespace
}  // namespace mnemo::model
