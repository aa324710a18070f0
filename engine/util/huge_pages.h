// Tensors in transparent huge pages: the big CPU buffers a decode step streams through.
//
// A decode step of 16 sessions reads the packed weights (~16 MB for mnemo-stdlib) and every
// session's key/value rings (~1.5 MB each at a 128-token history): more than the last-level
// cache holds, so it streams from memory. In 4 KiB pages that is ~10,000 pages per step, far
// beyond the TLB, and the hardware prefetcher stops at every page boundary. In 2 MiB pages it
// is a few dozen. mnemo-decode-batch-bench (16 rows, 100-128-token histories, the host's setting
// toggled, 2-core Zen 5 machine): two shards 2.35-2.68 -> 1.98 ms per step, one thread 2.8 ->
// 2.6. Through the server, tokens/s did not move beyond run-to-run spread
// (docs/results/batching.md, item 22).
//
// glibc never hands out 2 MiB-aligned blocks, and with the kernel's transparent_hugepage mode
// "madvise" (Debian's default) only regions advised MADV_HUGEPAGE get huge pages at all. So
// these functions map one anonymous region per call, aligned to 2 MiB and advised, and place
// the tensors in it one after another; the region is unmapped when the last of its tensors is
// freed. Where huge pages are off ("never") the region is plain 4 KiB pages: same results.
//
// Thread-safety: the functions are reentrant; the tensors are ordinary CPU tensors.
#ifndef MNEMO_ENGINE_UTIL_HUGE_PAGES_H_
#define MNEMO_ENGINE_UTIL_HUGE_PAGES_H_

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace mnemo::util {

inline constexpr int64_t kHugePageBytes = int64_t{2} << 20;

// Zero-filled contiguous CPU tensors of `type`, one per entry of `shapes`, sharing one region
// advised for huge pages (each tensor 64-byte aligned). Falls back to torch::zeros per tensor
// if the region cannot be mapped or would be under 1 MiB in all (mostly padding then). Made in
// inference mode, they are inference tensors.
std::vector<torch::Tensor> ZerosInHugePages(absl::Span<const std::vector<int64_t>> shapes,
                                            torch::ScalarType type = torch::kFloat32);

// Replaces each defined CPU tensor among `tensors` by a contiguous copy of it in one region
// advised for huge pages (the others are left alone): for buffers that live as long as a model
// and are read on every step (packed weights, position tables). Values, shapes and dtypes are
// unchanged; views of the old tensors keep the old storage.
void MoveToHugePages(absl::Span<torch::Tensor* const> tensors);

// Bytes of the mapping holding `pointer` that the kernel backs with huge pages right now
// (AnonHugePages in /proc/self/smaps), or -1 if no mapping holds it or smaps cannot be read.
// For tests and diagnostics.
int64_t HugePageBytesInMapping(const void* pointer);

// Whether the kernel gives huge pages to advised regions (transparent_hugepage "always" or
// "madvise"); false if it says "never" or does not say.
bool HugePagesEnabled();

}  // namespace mnemo::util

#endif  // MNEMO_ENGINE_UTIL_HUGE_PAGES_H_
