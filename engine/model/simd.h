// Vector types for the hand-written CPU kernels (PackedLinear, HostAttention): GCC's generic
// vectors of 16, 8 and 4 floats, one AVX-512, AVX or SSE register each. A kernel compiled for
// an instruction set (cpu_kernels.h) uses the width of its registers: GCC splits a wider vector
// through the stack.
//
// For kernel files only: the vectors must never cross a call boundary (everything here is
// inlined into the kernels), so GCC's -Wpsabi note that their calling convention depends on the
// target does not apply: including this silences it for the including file.
#ifndef MNEMO_ENGINE_MODEL_SIMD_H_
#define MNEMO_ENGINE_MODEL_SIMD_H_

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

// e^x in every lane, within 2 ulp of std::exp for x in [-87.3, 88] (x is clamped to that
// range: below it the result is ~1.2e-38 instead of a denormal or 0, above it e^88 ~ 1.7e38
// instead of more or infinity). Range reduction x = n ln 2 + r with ln 2 in two parts, a degree-7 polynomial for
// e^r on |r| <= ln 2 / 2, and 2^n built in the exponent bits.
template <typename V>
inline __attribute__((always_inline)) V Exp(V x) {
  using I = typename IntVector<V>::type;
  x = x < V{} + 88.0f ? x : V{} + 88.0f;  // comparisons give 0 / -1 lanes
  x = x > V{} - 87.3365f ? x : V{} - 87.3365f;
  // n = round(x / ln 2): truncate x / ln 2 + 1/2, one less where that rounded up (x < 0).
  const V shifted = x * 1.44269504088896341f + 0.5f;
  V n = __builtin_convertvector(__builtin_convertvector(shifted, I), V);
  n = n > shifted ? n - 1.0f : n;
  const V r = (x - n * 0.693359375f) + n * 2.12194440e-4f;  // x - n ln 2, exact in two steps
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

}  // namespace mnemo::model::simd

#endif  // MNEMO_ENGINE_MODEL_SIMD_H_
