#include "engine/util/binary_io.h"

#include <array>

#include "absl/strings/str_cat.h"

namespace mnemo::util {
namespace {

std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) != 0 ? 0x82F63B78u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}

uint32_t Crc32cTable(absl::string_view data, uint32_t crc) {
  static const std::array<uint32_t, 256> table = MakeCrcTable();
  for (unsigned char byte : data) crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t Crc32cSse42(absl::string_view data, uint32_t crc) {
  const char* p = data.data();
  size_t n = data.size();
  uint64_t c = crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = __builtin_ia32_crc32di(c, word);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = __builtin_ia32_crc32qi(c32, static_cast<unsigned char>(*p));
  return c32;
}
#endif

constexpr int kMaxDims = 8;

// The dtypes a file may hold: plain numbers, whose bytes are numel x elementSize. The others
// below NumOptions are refused: LibTorch throws for Undefined's size, and packs the sub-byte
// quantized types into fewer bytes than that, so reading one would overrun its tensor.
bool PlainDtype(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kUInt8:
    case torch::kInt8:
    case torch::kInt16:
    case torch::kInt32:
    case torch::kInt64:
    case torch::kFloat16:
    case torch::kBFloat16:
    case torch::kFloat32:
    case torch::kFloat64:
    case torch::kBool:
      return true;
    default:
      return false;
  }
}

std::string ShapeString(absl::Span<const int64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) absl::StrAppend(&out, i > 0 ? ", " : "", shape[i]);
  return out + "]";
}

}  // namespace

uint32_t Crc32c(absl::string_view data, uint32_t crc) {
#if defined(__x86_64__)
  static const bool hardware = __builtin_cpu_supports("sse4.2");
  if (hardware) return ~Crc32cSse42(data, ~crc);
#endif
  return ~Crc32cTable(data, ~crc);
}

void BinaryWriter::Bytes(absl::string_view bytes) {
  I64(static_cast<int64_t>(bytes.size()));
  Raw(bytes.data(), bytes.size());
}

void BinaryWriter::I64s(const std::vector<int64_t>& values) { Pod(values); }

void BinaryWriter::Tensor(const torch::Tensor& tensor) {
  U8(tensor.defined() ? 1 : 0);
  if (!tensor.defined()) return;
  const torch::Tensor t = tensor.to(torch::kCPU).contiguous();
  U8(static_cast<uint8_t>(t.scalar_type()));
  U8(static_cast<uint8_t>(t.dim()));
  for (int64_t d : t.sizes()) I64(d);
  Raw(t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size());
}

void BinaryWriter::TensorSlots(const torch::Tensor& tensor, int dim,
                                const std::vector<int64_t>& slots) {
  TORCH_CHECK(tensor.defined() && tensor.is_contiguous() && tensor.device().is_cpu(),
              "TensorSlots: a contiguous CPU tensor");
  U8(1);
  U8(static_cast<uint8_t>(tensor.scalar_type()));
  U8(static_cast<uint8_t>(tensor.dim()));
  for (int64_t d = 0; d < tensor.dim(); ++d) {
    I64(d == dim ? static_cast<int64_t>(slots.size()) : tensor.size(d));
  }
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= tensor.size(d);
  for (int64_t d = dim + 1; d < tensor.dim(); ++d) inner *= tensor.size(d);
  const size_t row = static_cast<size_t>(inner) * tensor.element_size();
  const char* base = static_cast<const char*>(tensor.data_ptr());
  const size_t block = static_cast<size_t>(tensor.size(dim)) * row;
  out_.reserve(out_.size() + static_cast<size_t>(outer) * slots.size() * row);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t slot : slots) Raw(base + o * block + static_cast<size_t>(slot) * row, row);
  }
}

absl::Status BinaryReader::Raw(void* out, size_t size, absl::string_view what) {
  if (size > remaining()) {
    return absl::DataLossError(absl::StrCat(what, ": needs ", size, " bytes, only ",
                                            remaining(), " left (truncated)"));
  }
  if (size > 0) std::memcpy(out, data_.data() + pos_, size);
  pos_ += size;
  return absl::OkStatus();
}

absl::StatusOr<absl::string_view> BinaryReader::View(size_t size, absl::string_view what) {
  if (size > remaining()) {
    return absl::DataLossError(absl::StrCat(what, ": needs ", size, " bytes, only ",
                                            remaining(), " left (truncated)"));
  }
  absl::string_view view = data_.substr(pos_, size);
  pos_ += size;
  return view;
}

absl::StatusOr<int64_t> BinaryReader::Count(absl::string_view what, int64_t max) {
  absl::StatusOr<int64_t> n = I64(what);
  if (!n.ok()) return n.status();
  if (*n < 0 || *n > max) {
    return absl::DataLossError(absl::StrCat(what, ": count ", *n, " outside [0, ", max, "]"));
  }
  return *n;
}

absl::StatusOr<std::string> BinaryReader::Bytes(absl::string_view what) {
  absl::StatusOr<int64_t> n = Count(what, static_cast<int64_t>(remaining()));
  if (!n.ok()) return n.status();
  absl::StatusOr<absl::string_view> view = View(static_cast<size_t>(*n), what);
  if (!view.ok()) return view.status();
  return std::string(*view);
}

absl::StatusOr<std::vector<int64_t>> BinaryReader::I64s(absl::string_view what) {
  return Pod<int64_t>(what);
}

namespace {

struct TensorHeader {
  bool defined = false;
  torch::ScalarType dtype = torch::kFloat32;
  std::vector<int64_t> shape;
  int64_t numel = 1;
};

absl::StatusOr<TensorHeader> ReadTensorHeader(BinaryReader& r, absl::string_view what) {
  TensorHeader h;
  absl::StatusOr<uint8_t> defined = r.U8(what);
  if (!defined.ok()) return defined.status();
  if (*defined > 1) return absl::DataLossError(absl::StrCat(what, ": bad tensor marker"));
  h.defined = *defined == 1;
  if (!h.defined) return h;
  absl::StatusOr<uint8_t> dtype = r.U8(what);
  absl::StatusOr<uint8_t> dims = dtype.ok() ? r.U8(what) : dtype;
  if (!dims.ok()) return dims.status();
  if (*dtype >= static_cast<uint8_t>(torch::ScalarType::NumOptions) ||
      !PlainDtype(static_cast<torch::ScalarType>(*dtype)) || *dims > kMaxDims) {
    return absl::DataLossError(absl::StrCat(what, ": bad tensor dtype or rank"));
  }
  h.dtype = static_cast<torch::ScalarType>(*dtype);
  bool overflow = false;
  for (int i = 0; i < *dims; ++i) {
    absl::StatusOr<int64_t> d = r.Count(what, int64_t{1} << 40);
    if (!d.ok()) return d.status();
    h.shape.push_back(*d);
    overflow |= __builtin_mul_overflow(h.numel, *d, &h.numel);
  }
  // Dimensions of up to 2^40 each: their product may not fit (it is no real tensor then).
  if (overflow) {
    return absl::DataLossError(absl::StrCat(what, ": a tensor of ", ShapeString(h.shape),
                                            " has more than 2^63 elements"));
  }
  return h;
}

}  // namespace

absl::Status BinaryReader::TensorInto(torch::Tensor& into, absl::string_view what) {
  absl::StatusOr<TensorHeader> h = ReadTensorHeader(*this, what);
  if (!h.ok()) return h.status();
  if (h->defined != into.defined() ||
      (h->defined && (h->dtype != into.scalar_type() || h->shape != into.sizes().vec()))) {
    auto describe = [](bool defined, torch::ScalarType dtype, absl::Span<const int64_t> shape) {
      return defined ? absl::StrCat(c10::toString(dtype), ShapeString(shape))
                     : std::string("absent");
    };
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": the file holds ", describe(h->defined, h->dtype, h->shape), ", this model has ",
        into.defined() ? describe(true, into.scalar_type(), into.sizes().vec())
                       : std::string("absent"),
        " (saved by another model or with other memory options)"));
  }
  if (!h->defined) return absl::OkStatus();
  const size_t size = static_cast<size_t>(h->numel) * into.element_size();
  if (into.is_contiguous() && into.device().is_cpu()) return Raw(into.data_ptr(), size, what);
  torch::Tensor staging = torch::empty(into.sizes(), into.options().device(torch::kCPU));
  if (absl::Status s = Raw(staging.data_ptr(), size, what); !s.ok()) return s;
  into.copy_(staging);
  return absl::OkStatus();
}

absl::StatusOr<torch::Tensor> BinaryReader::NewTensor(absl::string_view what) {
  absl::StatusOr<TensorHeader> h = ReadTensorHeader(*this, what);
  if (!h.ok()) return h.status();
  if (!h->defined) return torch::Tensor();
  // Checked before allocating: a damaged (or hostile) shape must not reserve memory the bytes
  // cannot fill.
  const size_t item = c10::elementSize(h->dtype);
  if (item == 0 || static_cast<uint64_t>(h->numel) > remaining() / item) {
    return absl::DataLossError(absl::StrCat(what, ": a tensor of ", ShapeString(h->shape),
                                            " needs more bytes than the ", remaining(), " left"));
  }
  torch::Tensor t = torch::empty(h->shape, torch::TensorOptions().dtype(h->dtype));
  if (absl::Status s = Raw(t.data_ptr(), static_cast<size_t>(h->numel) * t.element_size(), what);
      !s.ok()) {
    return s;
  }
  return t;
}

absl::Status ExpectEnd(const BinaryReader& reader, absl::string_view what) {
  if (reader.done()) return absl::OkStatus();
  return absl::DataLossError(
      absl::StrCat(what, ": ", reader.remaining(), " unexpected bytes at the end"));
}

}  // namespace mnemo::util
