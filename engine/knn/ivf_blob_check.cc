#include "engine/knn/ivf_blob_check.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace mnemo::knn {
namespace {

// FAISS's four-character tags, as it writes them (little-endian uint32).
constexpr uint32_t Tag(const char (&name)[5]) {
  return uint32_t(uint8_t(name[0])) | uint32_t(uint8_t(name[1])) << 8 |
         uint32_t(uint8_t(name[2])) << 16 | uint32_t(uint8_t(name[3])) << 24;
}

class BlobWalk {
 public:
  explicit BlobWalk(std::string_view blob) : blob_(blob) {}

  absl::Status Check() {
    uint64_t d = 0, nlist = 0, code_size = 0, sizes = 0;
    if (!Fourcc("IwFl") || !Header(&d) || !Read(&nlist, 8) || !Skip(8)) {  // nprobe
      return Reject("index header");
    }
    uint64_t quantizer_d = 0, centroids = 0;
    if (!Fourcc("IxFI") || !Header(&quantizer_d) || !Read(&centroids, 8) ||
        !Skip(centroids, 4)) {
      return Reject("quantizer");
    }
    uint8_t map_type = 0;
    uint64_t map_size = 0;
    if (!Read(&map_type, 1) || !Read(&map_size, 8) || !Skip(map_size, 8) ||
        (map_type == 2 && (!Read(&map_size, 8) || !Skip(map_size, 16)))) {
      return Reject("direct map");
    }
    // FAISS allocates per list (at 2^20 lists ~60 MB); KnnMemory makes at most 4096.
    uint32_t list_type = 0;
    if (!Fourcc("ilar") || !Read(&nlist, 8) || !Read(&code_size, 8) || !Read(&list_type, 4) ||
        !Read(&sizes, 8) || nlist > (1 << 20) || code_size != d * 4 || sizes > Left() / 8) {
      return Reject("inverted lists header");
    }
    std::vector<uint64_t> table(sizes);
    for (uint64_t& v : table) Read(&v, 8);
    // Each list holds n entries of code_size bytes of codes and an 8-byte id.
    uint64_t entries = 0;
    auto add = [&](uint64_t n) {
      entries += std::min<uint64_t>(n, Left() + 1);  // no overflow: at most `sizes` terms
      return entries <= Left();
    };
    if (list_type == Tag("full")) {
      if (sizes != nlist) return Reject("list sizes");
      for (uint64_t n : table) {
        if (!add(n)) return Reject("list sizes");
      }
    } else if (list_type == Tag("sprs")) {
      if (sizes % 2 != 0) return Reject("sparse list sizes");
      for (uint64_t j = 0; j < sizes; j += 2) {
        if (table[j] >= nlist || !add(table[j + 1])) return Reject("sparse list sizes");
      }
    } else {
      return Reject("list type");
    }
    if (entries > Left() / (code_size + 8)) return Reject("list contents");
    return absl::OkStatus();
  }

 private:
  absl::Status Reject(const char* field) const {
    return absl::DataLossError(absl::StrCat("IVF index: a blob of ", blob_.size(),
                                            " bytes is not as mnemo writes it at its ", field,
                                            " (byte ", pos_, ")"));
  }
  uint64_t Left() const { return blob_.size() - pos_; }
  bool Read(void* out, uint64_t size) {
    if (size > Left()) return false;
    std::memcpy(out, blob_.data() + pos_, size);
    pos_ += size;
    return true;
  }
  bool Skip(uint64_t count, uint64_t item = 1) {
    if (count > Left() / item) return false;
    pos_ += count * item;
    return true;
  }
  bool Fourcc(const char (&name)[5]) {
    uint32_t tag = 0;
    return Read(&tag, 4) && tag == Tag(name);
  }
  // d, ntotal, two unused counts, is_trained, metric type (and its argument past type 1).
  bool Header(uint64_t* d) {
    int32_t dim = 0, metric = 0;
    if (!Read(&dim, 4) || dim < 1 || dim > (1 << 20) || !Skip(8 * 3 + 1) || !Read(&metric, 4)) {
      return false;
    }
    *d = static_cast<uint64_t>(dim);
    return metric <= 1 || Skip(4);
  }

  std::string_view blob_;
  uint64_t pos_ = 0;
};

}  // namespace

absl::Status CheckIvfBlob(std::string_view blob) { return BlobWalk(blob).Check(); }

}  // namespace mnemo::knn
