// Vector types for the hand-written CPU kernels (PackedLinear, HostAttention): GCC's generic
// vectors of 16, 8 and 4 floats, one AVX-512, AVX or SSE register each. A kernel compiled for
// an instruction set (cpu_kernels.h) uses the width of its registers: GCC splits a wider vector
// through the stack.
//
// For kernel files only: the vectors must never cross a call boundary (everything here is
// inlined into the kernels), so GCC's -Wpsabi note that their calling convention depends on the
// target does not apply: the pragma below silences the warning, and the files that include this
// build with -Wno-psabi for the note (engine/model/CMakeLists.txt, tests/engine/model/).
#ifndef MNEMO_ENGINE_MODEL_SIMD_H_
#define MNEMO_ENGINE_MODEL_SIMD_H_

#include <c10/util/Half.h>
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#pragma GCC diagnostic ignored "-Wpsabi"

namespace mnemo::model::simd {

typedef float V16 __attribute__((vector_size(64)));
typedef float V8 __attribute__((vector_size(32)));
typedef float V4 __attribute__((vector_size(16)));
typedef int I16 __attribute__((vector_size(64)));
typedef int I8 __attribute__((vector_size(32)));
typedef int I4 __attribute__((vector_size(16)));

// The integer vector with V's lanes.
template <typename V>
struct IntVector;
template <>
struct IntVector<V16> { using type = I16; };
template <>
struct IntVector<V8> { using type = I8; };
template <>
struct IntVector<V4> { using type = I4; };

template <typename V>
constexpr int kLanes = sizeof(V) / sizeof(float);

// Unaligned load and store of one vector.
template <typename V>
inline __attribute__((always_inline)) V Load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

template <typename V>
inline __attribute__((always_inline)) void Store(float* p, V v) {
  std::memcpy(p, &v, sizeof(v));
}

// kLanes<V> IEEE float16 values at p (no alignment needed), widened to float exactly: one
// vcvtph2ps for V16 (AVX-512F) and V8 (F16C), four scalar conversions for V4 (any x86-64).
// Only inside a kernel compiled for that instruction set (cpu_kernels.h).
template <typename V>
V LoadHalves(const uint16_t* p);

// GCC 12 warns, where this inlines, that the AVX-512 intrinsic reads an uninitialised operand
// (its "undefined" pass-through vector, which the full mask never reads): the AVX-512 kernels
// silence -Wmaybe-uninitialized around themselves.
template <>
__attribute__((target("avx512f"))) inline __attribute__((always_inline)) V16 LoadHalves<V16>(
    const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

template <>
__attribute__((target("avx,f16c"))) inline __attribute__((always_inline)) V8 LoadHalves<V8>(
    const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

template <>
inline __attribute__((always_inline)) V4 LoadHalves<V4>(const uint16_t* p) {
  using c10::detail::fp16_ieee_to_fp32_value;
  return V4{fp16_ieee_to_fp32_value(p[0]), fp16_ieee_to_fp32_value(p[1]),
            fp16_ieee_to_fp32_value(p[2]), fp16_ieee_to_fp32_value(p[3])};
}

// The sum of a vector's lanes, by halves (one shuffle and add per halving).
inline __attribute__((always_inline)) float Sum(V4 v) { return (v[0] + v[2]) + (v[1] + v[3]); }

inline __attribute__((always_inline)) float Sum(V8 v) {
  V4 low, high;
  std::memcpy(&low, &v, sizeof(low));
  std::memcpy(&high, reinterpret_cast<const char*>(&v) + sizeof(low), sizeof(high));
  return Sum(low + high);
}

inline __attribute__((always_inline)) float Sum(V16 v) {
  V8 low, high;
  std::memcpy(&low, &v, sizeof(low));
  std::memcpy(&high, reinterpret_cast<const char*>(&v) + sizeof(low), sizeof(high));
  return Sum(low + high);
}

// e^(a + b) in every lane, a + b as if summed exactly: the range reduction subtracts n ln 2
// from a before adding b, so b's digits are not rounded away in a + b (NormalCdf's -x^2/2 + P).
// Within 2 ulp of std::exp for a + b in [-87.3, 88] (below that range the result is ~1.2e-38
// instead of a denormal or 0; above it, for b < 1, at most e^89 instead of more or infinity).
// Range reduction a + b = n ln 2 + r with ln 2 in two parts, a degree-7 polynomial for e^r on
// |r| <= ln 2 / 2, and 2^n built in the exponent bits.
template <typename V>
inline __attribute__((always_inline)) V ExpOfSum(V a, V b) {
  using I = typename IntVector<V>::type;
  // Below the range a + b becomes its bound; above it a does (comparisons give 0 / -1 lanes).
  // (Clearing b above the range too made GCC 12 split these selects into scalar code.)
  const V sum = a + b, low = V{} - 87.3365f, high = V{} + 88.0f;
  a = sum < low ? low : a;
  b = sum < low ? V{} : b;
  a = sum > high ? high : a;
  // n = round((a + b) / ln 2): truncate that + 1/2, one less where that rounded up (a + b < 0).
  // (a + b rounded only picks n; r below is exact but for the last step.)
  const V shifted = (a + b) * 1.44269504088896341f + 0.5f;
  V n = __builtin_convertvector(__builtin_convertvector(shifted, I), V);
  n = n > shifted ? n - 1.0f : n;
  const V r = ((a - n * 0.693359375f) + n * 2.12194440e-4f) + b;  // a + b - n ln 2
  V p = V{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const I exponent = (__builtin_convertvector(n, I) + 127) << 23;  // 2^n as a float's bits
  V scale;
  std::memcpy(&scale, &exponent, sizeof(scale));
  return p * scale;
}

// e^x in every lane: ExpOfSum(x, 0) (within 2 ulp of std::exp on [-87.3, 88], clamped to it).
template <typename V>
inline __attribute__((always_inline)) V Exp(V x) {
  return ExpOfSum(x, V{});
}

// Phi(x) = erfc(-x / sqrt 2) / 2, the standard normal distribution function, in every lane, to
// ~4.5e-7 relative error while the result is a normal float (x > ~-13; below that ~1e-38 or less
// instead of a denormal). erfc is the Chebyshev fit of Press et al., Numerical Recipes (2nd ed.,
// section 6.2),
//   erfc(z) = t exp(-z^2 + P(t)),  t = 1 / (1 + z / 2),  z = |x| / sqrt 2,
// with erfc(-z) = 2 - erfc(z). z^2 = x^2 / 2 is taken exactly, as (xh^2 + xl (x + xh)) / 2 with
// xh = x with the low 12 bits of its significand cleared: a rounded z * z (or a rounded z) would
// put ulp(z^2) of error into the exponent (1e-5 relative at x = -11).
template <typename V>
inline __attribute__((always_inline)) V NormalCdf(V x) {
  using I = typename IntVector<V>::type;
  I bits;
  std::memcpy(&bits, &x, sizeof(bits));
  bits &= ~0xfff;
  V xh;
  std::memcpy(&xh, &bits, sizeof(xh));
  const V xl = x - xh;
  const V z = (x < V{} ? -x : x) * 0.70710678118654752f;
  const V t = 1.0f / (1.0f + 0.5f * z);
  V p = V{} + 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  // erfc(|x| / sqrt 2) / 2 = t/2 e^(-x^2/2 + P)
  const V half_tail = 0.5f * t * ExpOfSum(-0.5f * (xh * xh), p - 0.5f * (xl * (x + xh)));
  return x < V{} ? half_tail : 1.0f - half_tail;
}

}  // namespace mnemo::model::simd

#endif  // MNEMO_ENGINE_MODEL_SIMD_H_
