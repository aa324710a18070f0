// "[2, 3, 4]": how error messages print a tensor's shape (torch::IntArrayRef and
// std::vector<int64_t> both convert to the span).
#ifndef MNEMO_ENGINE_UTIL_SHAPE_STRING_H_
#define MNEMO_ENGINE_UTIL_SHAPE_STRING_H_

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"

namespace mnemo::util {

inline std::string ShapeString(absl::Span<const int64_t> sizes) {
  return absl::StrCat("[", absl::StrJoin(sizes, ", "), "]");
}

}  // namespace mnemo::util

#endif  // MNEMO_ENGINE_UTIL_SHAPE_STRING_H_
