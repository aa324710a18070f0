#include "engine/model/simd.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace mnemo::model::simd {
namespace {

// simd::Exp of each value in `xs`, through vectors V (xs.size() a multiple of V's lanes).
template <typename V>
std::vector<float> ExpAll(const std::vector<float>& xs) {
  std::vector<float> out(xs.size());
  for (size_t i = 0; i < xs.size(); i += kLanes<V>) {
    Store<V>(out.data() + i, Exp(Load<V>(xs.data() + i)));
  }
  return out;
}

template <typename V>
class SimdExpTest : public ::testing::Test {};
using VectorTypes = ::testing::Types<V16, V8, V4>;
TYPED_TEST_SUITE(SimdExpTest, VectorTypes);

// Within 2 ulp of std::exp over the whole range it covers (each x a float: the grid is dense
// enough to cross every reduction interval many times). Measured: at most 1.0.
TYPED_TEST(SimdExpTest, AgreesWithStdExpWithinTwoUlp) {
  std::vector<float> xs;
  for (float x = -87.3f; x <= 88.0f; x += 0.00173f) xs.push_back(x);
  for (float x : {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.34657359f, 0.34657359f, 1e-7f, -1e-7f}) {
    xs.push_back(x);
  }
  while (xs.size() % 16 != 0) xs.push_back(0.0f);
  const std::vector<float> got = ExpAll<TypeParam>(xs);
  for (size_t i = 0; i < xs.size(); ++i) {
    const float want = std::exp(xs[i]);
    // In units of the float spacing at `want` (its ulp, or half of it just past a power of 2).
    const double error = std::abs(static_cast<double>(got[i]) - want) /
                         (static_cast<double>(want) * std::numeric_limits<float>::epsilon());
    ASSERT_LE(error, 2.0) << "x = " << xs[i] << ": " << got[i] << " vs " << want;
  }
  EXPECT_EQ(ExpAll<TypeParam>(std::vector<float>(16, 0.0f))[0], 1.0f);
}

// Outside it the input is clamped: tiny positive results below, e^88 above; never a NaN,
// infinity or denormal (softmax weights of far-off scores become ~0, not slow paths).
TYPED_TEST(SimdExpTest, ClampsOutsideItsRange) {
  std::vector<float> xs = {-87.4f, -100.0f, -1e30f, -INFINITY, 88.5f, 1000.0f, 1e30f, INFINITY};
  xs.resize(16, -200.0f);
  const std::vector<float> got = ExpAll<TypeParam>(xs);
  const float top = ExpAll<TypeParam>(std::vector<float>(16, 88.0f))[0];
  for (size_t i = 0; i < xs.size(); ++i) {
    if (xs[i] < 0) {
      EXPECT_GT(got[i], 0.0f) << xs[i];
      EXPECT_LE(got[i], 1.2e-38f) << xs[i];
      EXPECT_TRUE(std::isnormal(got[i])) << xs[i];
    } else {
      EXPECT_EQ(got[i], top) << xs[i];
      EXPECT_TRUE(std::isfinite(got[i])) << xs[i];
    }
  }
}

// ExpOfSum(a, b) is e^(a + b) with the sum taken exactly: a large a (a whole number of ulps of
// it is more than b's rounding) and a b well below ulp(a) that a + b in floats would drop.
// Below the range the result is the clamp's, whatever b is.
TYPED_TEST(SimdExpTest, ExpOfSumKeepsTheDigitsOfTheSmallTerm) {
  constexpr int kLanes = simd::kLanes<TypeParam>;
  for (float a : {-80.0f, -41.5f, -3.0f, 0.0f, 2.5f, 60.0f}) {
    for (float b : {3e-6f, -2.5e-6f, 0.3f, -1.2f}) {
      const float got = ExpOfSum(TypeParam{} + a, TypeParam{} + b)[0];
      const double want = std::exp(static_cast<double>(a) + static_cast<double>(b));
      EXPECT_LE(std::abs(got - want) / want, 3.0 * std::numeric_limits<float>::epsilon())
          << "a = " << a << ", b = " << b;
    }
  }
  // e^(-80 + 3e-6): a + b rounds to -80 in floats, 3e-6 relative lower than the exact value.
  EXPECT_NE(ExpOfSum(TypeParam{} - 80.0f, TypeParam{} + 3e-6f)[0], Exp(TypeParam{} - 80.0f)[0]);
  for (float b : {0.0f, -5.0f, -5e8f}) {
    const float got = ExpOfSum(TypeParam{} - 87.0f, TypeParam{} + b)[kLanes - 1];
    EXPECT_TRUE(std::isnormal(got)) << b;
    EXPECT_LE(got, 1.7e-38f) << b;
  }
}

}  // namespace
}  // namespace mnemo::model::simd
