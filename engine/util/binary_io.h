// BinaryWriter / BinaryReader: the little-endian encoding of mnemo's own binary files (session
// snapshots and logs, docs/durability.md), plus the CRC-32C that checks them.
//
// A writer appends to a std::string; a reader walks a string_view and never reads past its end:
// every Read* returns DATA_LOSS naming `what` (the caller's description of the field, e.g.
// "layer 3 k_raw") when the bytes run out or a value is impossible. Tensors are written with
// their dtype and shape and read back into a tensor the caller already holds, whose dtype and
// shape must match (FAILED_PRECONDITION otherwise: the file was made for another model or other
// memory options). Thread-compatible.
#ifndef MNEMO_ENGINE_UTIL_BINARY_IO_H_
#define MNEMO_ENGINE_UTIL_BINARY_IO_H_

#include <torch/types.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mnemo::util {

// CRC-32C (Castagnoli, the checksum of iSCSI, ext4 and LevelDB) of `data`, continuing from
// `crc`: SSE4.2's crc32 instruction where the CPU has it (~10 GB/s; session log records are
// megabytes), a table otherwise.
uint32_t Crc32c(absl::string_view data, uint32_t crc = 0);

class BinaryWriter {
 public:
  void U8(uint8_t v) { Raw(&v, 1); }
  void U32(uint32_t v) { Raw(&v, 4); }
  void I64(int64_t v) { Raw(&v, 8); }
  void F64(double v) { Raw(&v, 8); }
  void Bytes(absl::string_view bytes);  // length-prefixed
  void I64s(const std::vector<int64_t>& values);  // count-prefixed
  template <typename T>
  void Pod(const std::vector<T>& values) {  // count-prefixed, plain data
    I64(static_cast<int64_t>(values.size()));
    Raw(values.data(), values.size() * sizeof(T));
  }
  // An undefined tensor is written as such; a defined one as dtype, shape, contiguous bytes.
  void Tensor(const torch::Tensor& tensor);
  // Tensor(tensor.index_select(dim, slots)) without the intermediate tensor: the rows are
  // copied straight from `tensor` (contiguous, on the CPU) into the output.
  void TensorSlots(const torch::Tensor& tensor, int dim, const std::vector<int64_t>& slots);
  void Reserve(size_t bytes) { out_.reserve(bytes); }
  // Overwrites bytes already written (a header patched once what follows is known).
  void Patch(size_t offset, const void* data, size_t size) {
    std::memcpy(out_.data() + offset, data, size);
  }
  void Raw(const void* data, size_t size) {
    out_.append(static_cast<const char*>(data), size);
  }

  const std::string& data() const { return out_; }
  std::string Take() { return std::move(out_); }
  size_t size() const { return out_.size(); }

 private:
  std::string out_;
};

class BinaryReader {
 public:
  explicit BinaryReader(absl::string_view data) : data_(data) {}

  absl::StatusOr<uint8_t> U8(absl::string_view what) { return Scalar<uint8_t>(what); }
  absl::StatusOr<uint32_t> U32(absl::string_view what) { return Scalar<uint32_t>(what); }
  absl::StatusOr<int64_t> I64(absl::string_view what) { return Scalar<int64_t>(what); }
  absl::StatusOr<double> F64(absl::string_view what) { return Scalar<double>(what); }
  // A count or size that must lie in [0, max].
  absl::StatusOr<int64_t> Count(absl::string_view what, int64_t max);
  absl::StatusOr<std::string> Bytes(absl::string_view what);
  absl::StatusOr<std::vector<int64_t>> I64s(absl::string_view what);
  template <typename T>
  absl::StatusOr<std::vector<T>> Pod(absl::string_view what) {
    absl::StatusOr<int64_t> n = Count(what, static_cast<int64_t>(remaining() / sizeof(T)));
    if (!n.ok()) return n.status();
    std::vector<T> values(static_cast<size_t>(*n));
    absl::Status s = Raw(values.data(), values.size() * sizeof(T), what);
    if (!s.ok()) return s;
    return values;
  }
  // A tensor written by BinaryWriter::Tensor into `into`, which must have the same
  // definedness, dtype and shape (FAILED_PRECONDITION naming `what` otherwise).
  absl::Status TensorInto(torch::Tensor& into, absl::string_view what);
  // A tensor written by BinaryWriter::Tensor, as a new CPU tensor (possibly undefined).
  absl::StatusOr<torch::Tensor> NewTensor(absl::string_view what);
  absl::Status Raw(void* out, size_t size, absl::string_view what);
  // One plain value (U8, U32, I64, F64 are this).
  template <typename T>
  absl::StatusOr<T> Scalar(absl::string_view what) {
    T v{};
    if (absl::Status s = Raw(&v, sizeof(T), what); !s.ok()) return s;
    return v;
  }
  // The next `size` bytes, not copied.
  absl::StatusOr<absl::string_view> View(size_t size, absl::string_view what);

  size_t remaining() const { return data_.size() - pos_; }
  bool done() const { return pos_ == data_.size(); }

 private:
  absl::string_view data_;
  size_t pos_ = 0;
};

// DATA_LOSS unless every byte was read (a section longer than its reader expects).
absl::Status ExpectEnd(const BinaryReader& reader, absl::string_view what);

}  // namespace mnemo::util

#endif  // MNEMO_ENGINE_UTIL_BINARY_IO_H_
