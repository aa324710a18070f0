#include "engine/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/util/shape_string.h"

namespace mnemo::model {
namespace {

using nlohmann::json;

// Headers above this are certainly corrupt (real ones are kilobytes).
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

struct DType {
  const char* name;
  torch::ScalarType type;
  size_t bytes;
};
constexpr DType kDTypes[] = {
    {"F32", torch::kFloat32, 4}, {"F16", torch::kFloat16, 2}, {"BF16", torch::kBFloat16, 2},
    {"F64", torch::kFloat64, 8}, {"I64", torch::kInt64, 8},   {"I32", torch::kInt32, 4},
    {"I16", torch::kInt16, 2},   {"I8", torch::kInt8, 1},     {"U8", torch::kUInt8, 1},
};

const DType* FindDType(const std::string& name) {
  for (const DType& d : kDTypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}
const DType* FindDType(torch::ScalarType type) {
  for (const DType& d : kDTypes) {
    if (type == d.type) return &d;
  }
  return nullptr;
}

// Whether `list` is an array of integers (of non-negative ones when `unsigned_only`).
bool AllIntegers(const json& list, bool unsigned_only) {
  if (!list.is_array()) return false;
  return std::all_of(list.begin(), list.end(), [&](const json& v) {
    return unsigned_only ? v.is_number_unsigned() : v.is_number_integer();
  });
}


}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    std::string message = absl::StrCat(path, ": ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(message) : absl::PermissionDeniedError(message);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return absl::InternalError(absl::StrCat(path, ": fstat failed"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return absl::DataLossError(
        absl::StrCat(path, ": truncated (", size, " bytes; a safetensors file needs >= 8)"));
  }
  void* base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) return absl::InternalError(absl::StrCat(path, ": mmap failed"));
  std::unique_ptr<SafetensorsFile> file(
      new SafetensorsFile(path, static_cast<const uint8_t*>(base), size));

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | file->base_[i];
  if (header_len > kMaxHeaderBytes || header_len > size - 8) {
    return absl::DataLossError(absl::StrCat(path, ": header length ", header_len,
                                            " does not fit in a file of ", size, " bytes"));
  }
  file->data_offset_ = 8 + header_len;
  const size_t data_size = size - file->data_offset_;

  json header;
  try {
    header = json::parse(reinterpret_cast<const char*>(file->base_ + 8),
                         reinterpret_cast<const char*>(file->base_ + 8 + header_len));
  } catch (const json::exception& e) {
    return absl::DataLossError(absl::StrCat(path, ": header is not valid JSON: ", e.what()));
  }
  if (!header.is_object()) return absl::DataLossError(path + ": header is not a JSON object");

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& value = it.value();
    if (name == "__metadata__") {
      if (!value.is_object()) return absl::DataLossError(path + ": __metadata__ not an object");
      for (auto m = value.begin(); m != value.end(); ++m) {
        if (m.value().is_string()) file->metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = absl::StrCat(path, ": tensor '", name, "'");
    try {
      const DType* dtype = FindDType(value.at("dtype").get<std::string>());
      if (dtype == nullptr) {
        return absl::DataLossError(
            absl::StrCat(where, " has unsupported dtype ", value.at("dtype").dump()));
      }
      Entry entry;
      entry.dtype = dtype->type;
      entry.dtype_name = dtype->name;
      // Integers only: nlohmann turns a number like 1e30 into an integer with a cast that is
      // undefined outside the integer's range.
      if (!AllIntegers(value.at("shape"), /*unsigned_only=*/false) ||
          !AllIntegers(value.at("data_offsets"), /*unsigned_only=*/true)) {
        return absl::DataLossError(absl::StrCat(where, " has a shape or data offsets that are "
                                                       "not lists of integers"));
      }
      entry.shape = value.at("shape").get<std::vector<int64_t>>();
      const auto offsets = value.at("data_offsets").get<std::vector<uint64_t>>();
      if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data_size) {
        return absl::DataLossError(absl::StrCat(where, " has data offsets ",
                                                value.at("data_offsets").dump(),
                                                " outside the data region of ", data_size,
                                                " bytes (truncated file?)"));
      }
      // Checked for overflow: a shape whose size wraps around to the span would pass.
      uint64_t numel = 1, bytes = 0;
      bool overflow = false;
      for (int64_t dim : entry.shape) {
        if (dim < 0) return absl::DataLossError(absl::StrCat(where, " has a negative dimension"));
        overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(dim), &numel);
      }
      overflow |= __builtin_mul_overflow(numel, dtype->bytes, &bytes);
      if (overflow || bytes != offsets[1] - offsets[0]) {
        return absl::DataLossError(absl::StrCat(
            where, " of shape ", util::ShapeString(entry.shape), " and dtype ", dtype->name,
            " needs ", overflow ? "more than 2^64" : absl::StrCat(bytes), " bytes but spans ",
            offsets[1] - offsets[0]));
      }
      entry.begin = offsets[0];
      entry.end = offsets[1];
      file->entries_.emplace(name, std::move(entry));
    } catch (const json::exception& e) {
      return absl::DataLossError(absl::StrCat(where, " has a malformed entry: ", e.what()));
    }
  }
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  ::munmap(const_cast<uint8_t*>(base_), size_);
}

absl::StatusOr<torch::Tensor> SafetensorsFile::ReadFloat(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat(path_, ": tensor '", name, "' is missing"));
  }
  const Entry& e = it->second;
  // The mapping is read-only and may be unaligned for the dtype: copy the bytes out first.
  torch::Tensor raw = torch::empty({static_cast<int64_t>(e.end - e.begin)}, torch::kUInt8);
  // (An empty tensor has no data pointer to copy to.)
  if (e.end > e.begin) {
    std::memcpy(raw.data_ptr<uint8_t>(), base_ + data_offset_ + e.begin, e.end - e.begin);
  }
  torch::Tensor typed = raw.view(e.dtype).reshape(e.shape);
  return typed.to(torch::kFloat32);
}

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> contiguous;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    const DType* dtype = FindDType(tensor.scalar_type());
    if (dtype == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has unsupported dtype"));
    }
    torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * dtype->bytes;
    header[name] = {{"dtype", dtype->name},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    contiguous.push_back(std::move(t));
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');  // align the data region

  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write ", tmp));
    uint64_t n = header_text.size();
    char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    out.write(len, 8);
    out.write(header_text.data(), static_cast<std::streamsize>(header_text.size()));
    for (const torch::Tensor& t : contiguous) {
      out.write(static_cast<const char*>(t.data_ptr()),
                static_cast<std::streamsize>(t.numel() * t.element_size()));
    }
    if (!out) return absl::DataLossError(absl::StrCat("short write to ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

}  // namespace mnemo::model
