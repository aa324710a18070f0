// Safetensors reading (memory-mapped) and writing.
//
// Format: an 8-byte little-endian header length N, N bytes of JSON
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the data.
// Every offset, size and dtype is checked at Open, so a corrupt or truncated file is an error
// that names the file and tensor, never a crash.
#ifndef MNEMO_ENGINE_MODEL_SAFETENSORS_H_
#define MNEMO_ENGINE_MODEL_SAFETENSORS_H_

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace mnemo::model {

// A read-only, memory-mapped safetensors file. Immutable after Open; thread-compatible.
class SafetensorsFile {
 public:
  struct Entry {
    torch::ScalarType dtype;
    std::string dtype_name;  // as written in the file ("F32", "BF16", ...)
    std::vector<int64_t> shape;
    size_t begin = 0;  // byte offsets into the data region
    size_t end = 0;
  };

  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();

  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, Entry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // A float32 CPU copy of tensor `name`. NOT_FOUND if absent.
  absl::StatusOr<torch::Tensor> ReadFloat(const std::string& name) const;

 private:
  SafetensorsFile(std::string path, const uint8_t* base, size_t size)
      : path_(std::move(path)), base_(base), size_(size) {}

  const std::string path_;
  const uint8_t* const base_;  // the whole mapped file
  const size_t size_;
  size_t data_offset_ = 0;     // where the data region starts
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` (any dtype among F32/F16/BF16/I64/I32) to `path` atomically
// (a temporary file renamed into place).
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace mnemo::model

#endif  // MNEMO_ENGINE_MODEL_SAFETENSORS_H_
