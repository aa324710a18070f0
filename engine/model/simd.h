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

}  // namespace mnemo::model::simd

#endif  // MNEMO_ENGINE_MODEL_SIMD_H_
