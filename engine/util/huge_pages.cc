#include "engine/util/huge_pages.h"

#include <sys/mman.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

namespace mnemo::util {
namespace {

constexpr int64_t kAlignment = 64;  // each tensor's start: a cache line, as LibTorch's

int64_t RoundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// An anonymous mapping of at least `bytes`, starting on a 2 MiB boundary and advised
// MADV_HUGEPAGE; the kernel zero-fills its pages on first touch. Returns null if mmap fails.
struct Region {
  void* start = nullptr;
  int64_t length = 0;
};

Region MapRegion(int64_t bytes) {
  const int64_t length = RoundUp(bytes, kHugePageBytes);
  // Over-map by one huge page, then cut the unaligned head and the rest of the tail away.
  const int64_t mapped = length + kHugePageBytes;
  void* raw = mmap(nullptr, static_cast<size_t>(mapped), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return {};
  const auto address = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (address + kHugePageBytes - 1) & ~uintptr_t(kHugePageBytes - 1);
  const int64_t head = static_cast<int64_t>(aligned - address);
  if (head > 0) munmap(raw, static_cast<size_t>(head));
  const int64_t tail = mapped - head - length;
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + length), static_cast<size_t>(tail));
  void* start = reinterpret_cast<void*>(aligned);
  madvise(start, static_cast<size_t>(length), MADV_HUGEPAGE);  // advice only: may be refused
  return Region{start, length};
}

// Unmaps the region when the last tensor placed in it is freed.
struct RegionOwner {
  Region region;
  ~RegionOwner() { munmap(region.start, static_cast<size_t>(region.length)); }
};

}  // namespace

std::vector<torch::Tensor> ZerosInHugePages(absl::Span<const std::vector<int64_t>> shapes,
                                            torch::ScalarType type) {
  const int64_t element = static_cast<int64_t>(c10::elementSize(type));
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (const std::vector<int64_t>& shape : shapes) {
    int64_t count = 1;
    for (int64_t size : shape) count *= size;
    offsets.push_back(total);
    total += RoundUp(count * element, kAlignment);
  }
  std::vector<torch::Tensor> tensors;
  const torch::TensorOptions options = torch::TensorOptions().dtype(type);
  // Below half a huge page the region would mostly be padding (a huge page is backed whole
  // once touched): small sets of tensors (tests' tiny models) stay on LibTorch's allocator.
  const Region region = total >= kHugePageBytes / 2 ? MapRegion(total) : Region{};
  if (region.start == nullptr) {
    for (const std::vector<int64_t>& shape : shapes) tensors.push_back(torch::zeros(shape, options));
    return tensors;
  }
  auto owner = std::make_shared<RegionOwner>();
  owner->region = region;
  char* base = static_cast<char*>(region.start);
  for (size_t i = 0; i < shapes.size(); ++i) {
    // Each tensor holds a reference to the region; the last one freed unmaps it.
    tensors.push_back(torch::from_blob(
        base + offsets[i], shapes[i], [owner](void*) {}, options));
  }
  return tensors;
}

void MoveToHugePages(absl::Span<torch::Tensor* const> tensors) {
  std::vector<torch::Tensor*> moving;
  std::vector<std::vector<int64_t>> shapes;
  for (torch::Tensor* tensor : tensors) {
    if (!tensor->defined() || !tensor->device().is_cpu()) continue;
    // One region per dtype would be needed for mixed types; every caller's are float32 today,
    // and a tensor of another type stays where it is.
    if (tensor->scalar_type() != torch::kFloat32) continue;
    moving.push_back(tensor);
    shapes.push_back(tensor->sizes().vec());
  }
  if (moving.empty()) return;
  torch::NoGradGuard no_grad;  // copies of cached buffers, never part of a graph
  std::vector<torch::Tensor> copies = ZerosInHugePages(shapes, torch::kFloat32);
  for (size_t i = 0; i < moving.size(); ++i) {
    copies[i].copy_(*moving[i]);
    *moving[i] = std::move(copies[i]);
  }
}

int64_t HugePageBytesInMapping(const void* pointer) {
  std::ifstream smaps("/proc/self/smaps");
  if (!smaps) return -1;
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintmax_t start = 0, end = 0;
    // A mapping's header line: "start-end perms offset dev inode path".
    if (std::sscanf(line.c_str(), "%" SCNxMAX "-%" SCNxMAX " ", &start, &end) == 2 &&
        line.find('-') < line.find(' ')) {
      if (inside) return 0;  // the mapping's fields ended without AnonHugePages
      inside = address >= start && address < end;
      continue;
    }
    if (inside && line.rfind("AnonHugePages:", 0) == 0) {
      long long kib = 0;
      if (std::sscanf(line.c_str() + std::strlen("AnonHugePages:"), "%lld", &kib) != 1) return -1;
      return static_cast<int64_t>(kib) * 1024;
    }
  }
  return inside ? 0 : -1;
}

bool HugePagesEnabled() {
  std::ifstream mode("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string text;
  if (!std::getline(mode, text)) return false;
  return text.find("[always]") != std::string::npos ||
         text.find("[madvise]") != std::string::npos;
}

}  // namespace mnemo::util
