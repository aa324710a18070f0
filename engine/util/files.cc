#include "engine/util/files.h"

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mnemo::util {

absl::StatusOr<std::string> ReadFile(const std::string& path, int64_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::string bytes;
  if (max_bytes > 0) {
    bytes.resize(static_cast<size_t>(max_bytes));
    in.read(bytes.data(), max_bytes);
    bytes.resize(static_cast<size_t>(in.gcount()));
  } else {
    std::ostringstream buffer;
    buffer << in.rdbuf();
    bytes = std::move(buffer).str();
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read failed"));
  return bytes;
}

}  // namespace mnemo::util
