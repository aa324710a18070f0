// Range checks for numbers read from JSON configs (config.json of native and Hugging Face
// models). nlohmann's get<T> converts with a plain cast, which is undefined for a float outside
// T's range (1e30) and wraps a large integer; readers check with FitsIn first.
//
// Header-only, pure; thread-safe.
#ifndef MNEMO_ENGINE_MODEL_JSON_NUMBER_H_
#define MNEMO_ENGINE_MODEL_JSON_NUMBER_H_

#include <cstdint>
#include <limits>

#include <nlohmann/json.hpp>

namespace mnemo::model {

// Whether the number `value` fits in the integer type T (true for non-numbers: get<T> then
// reports the type error itself).
template <typename T>
bool FitsIn(const nlohmann::json& value) {
  if (value.is_number_float()) {
    // [min, -min): -min = max + 1, a power of two that double holds exactly.
    const double v = value.get<double>();
    const double min = static_cast<double>(std::numeric_limits<T>::min());
    return v >= min && v < -min;
  }
  if (value.is_number_unsigned()) {
    return value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
  }
  if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    return v >= std::numeric_limits<T>::min() && v <= std::numeric_limits<T>::max();
  }
  return true;
}

}  // namespace mnemo::model

#endif  // MNEMO_ENGINE_MODEL_JSON_NUMBER_H_
