// safetensors_fuzz: engine/model/safetensors.cc, which reads every checkpoint and exit
// classifier the server loads.
//
// Input: the bytes of a .safetensors file ([u64 header length][JSON header][data]). They are
// written to a scratch file and opened with SafetensorsFile::Open, as a model folder's are.
//
// Checks (safetensors.h: "every offset, size and dtype is checked at Open, so a corrupt or
// truncated file is an error that names the file and tensor, never a crash"):
//   - every entry Open accepts lies inside the file, and its bytes are exactly shape x dtype;
//   - ReadFloat of every entry succeeds with a float32 tensor of the entry's shape, and of an
//     absent name is NOT_FOUND;
//   - what was read, written back with WriteSafetensors, opens and reads back equal.
#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/model/safetensors.h"
#include "fuzz/fuzz_support.h"

namespace mnemo::fuzz {
namespace {

using model::SafetensorsFile;

void CheckEntries(const SafetensorsFile& file, size_t file_size) {
  for (const auto& [name, entry] : file.entries()) {
    uint64_t numel = 1;
    for (int64_t dim : entry.shape) {
      FUZZ_CHECK(dim >= 0, absl::StrCat("tensor '", name, "' has a negative dimension"));
      FUZZ_CHECK(!__builtin_mul_overflow(numel, static_cast<uint64_t>(dim), &numel),
                 absl::StrCat("tensor '", name, "' has more elements than 2^64"));
    }
    const uint64_t bytes = numel * torch::elementSize(entry.dtype);
    FUZZ_CHECK(entry.begin <= entry.end && entry.end <= file_size,
               absl::StrCat("tensor '", name, "' spans [", entry.begin, ", ", entry.end, ") of a ",
                            file_size, "-byte file"));
    FUZZ_CHECK(bytes / torch::elementSize(entry.dtype) == numel && bytes == entry.end - entry.begin,
               absl::StrCat("tensor '", name, "' spans ", entry.end - entry.begin, " bytes for ",
                            numel, " elements"));
  }
}

}  // namespace
}  // namespace mnemo::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mnemo::fuzz;
  const std::string path = ScratchDir() + "/input.safetensors";
  WriteFile(path, std::string_view(reinterpret_cast<const char*>(data), size));
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
  if (!file.ok()) return 0;
  CheckEntries(**file, size);

  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& [name, entry] : (*file)->entries()) {
    absl::StatusOr<torch::Tensor> tensor = (*file)->ReadFloat(name);
    FUZZ_CHECK(tensor.ok(), absl::StrCat("ReadFloat('", name, "'): ", tensor.status().ToString()));
    FUZZ_CHECK(tensor->scalar_type() == torch::kFloat32 && tensor->sizes().vec() == entry.shape,
               absl::StrCat("ReadFloat('", name, "') has the wrong dtype or shape"));
    tensors.emplace_back(name, *std::move(tensor));
  }
  FUZZ_CHECK(absl::IsNotFound((*file)->ReadFloat("\x01no such tensor").status()),
             "ReadFloat of an absent tensor is not NOT_FOUND");

  const std::string copy = ScratchDir() + "/copy.safetensors";
  const absl::Status written = mnemo::model::WriteSafetensors(copy, tensors, (*file)->metadata());
  FUZZ_CHECK(written.ok(), absl::StrCat("WriteSafetensors: ", written.ToString()));
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> reopened = SafetensorsFile::Open(copy);
  FUZZ_CHECK(reopened.ok(), absl::StrCat("the rewritten file: ", reopened.status().ToString()));
  FUZZ_CHECK((*reopened)->metadata() == (*file)->metadata(), "metadata changed on rewrite");
  for (const auto& [name, tensor] : tensors) {
    // Bit for bit (NaNs included): float32 is written and read back as it is.
    absl::StatusOr<torch::Tensor> back = (*reopened)->ReadFloat(name);
    FUZZ_CHECK(back.ok() && back->sizes() == tensor.sizes() &&
                   (tensor.numel() == 0 ||
                    std::memcmp(back->data_ptr(), tensor.data_ptr(), tensor.nbytes()) == 0),
               absl::StrCat("tensor '", name, "' changed on rewrite"));
  }
  return 0;
}
