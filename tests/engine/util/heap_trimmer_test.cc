// HeapTrimmer: freed heap memory that glibc keeps resident goes back to the kernel when enough
// has piled up, and not otherwise; the thread checks on its interval and stops promptly.
#include "engine/util/heap_trimmer.h"

#include <malloc.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace mnemo::util {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// Sanitizer builds replace glibc's malloc with their own allocator, whose memory mallinfo2
// does not see and malloc_trim cannot give back: the heap these tests measure is not there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kGlibcHeap = false;
#else
constexpr bool kGlibcHeap = true;
#endif

// Frees 15 of every 16 blocks of `blocks` (each touched), so the freed memory sits between
// live blocks: the heap cannot shrink from its top, and only a trim gives those pages back.
std::vector<char*> FragmentedHeap(int count, size_t block) {
  std::vector<char*> all;
  for (int i = 0; i < count; ++i) {
    char* p = static_cast<char*>(malloc(block));
    std::memset(p, i & 0xff, block);
    all.push_back(p);
  }
  std::vector<char*> kept;
  for (int i = 0; i < count; ++i) {
    if (i % 16 == 15) {
      kept.push_back(all[static_cast<size_t>(i)]);
    } else {
      free(all[static_cast<size_t>(i)]);
    }
  }
  return kept;
}

TEST(HeapTrimmerTest, ReadsUsage) {
  if (!kGlibcHeap) GTEST_SKIP() << "a sanitizer's allocator replaces glibc's heap";
  const HeapUsage before = ReadHeapUsage();
  char* block = static_cast<char*>(malloc(8 * kMiB));
  std::memset(block, 1, 8 * kMiB);
  const HeapUsage during = ReadHeapUsage();
  EXPECT_GE(during.in_use - before.in_use, 8 * kMiB);
  EXPECT_GT(ResidentBytes(), 8 * kMiB);
  free(block);
}

TEST(HeapTrimmerTest, GivesBackWhatPiledUpAndOnlyThen) {
  if (!kGlibcHeap) GTEST_SKIP() << "a sanitizer's allocator replaces glibc's heap";
  // 64 KiB blocks stay on the heap (below the mmap threshold, as ConfigureCpuRuntime sets it
  // and as glibc's own default of 128 KiB would).
  HeapTrimmer trimmer({absl::ZeroDuration(), 32 * kMiB}, nullptr);
  trimmer.CheckNow();                                        // whatever start-up left behind
  std::vector<char*> kept = FragmentedHeap(2048, 64 << 10);  // 128 MiB, 120 MiB freed
  const HeapTrimmer::Check first = trimmer.CheckNow();
  EXPECT_GE(first.usage.free, 100 * kMiB);
  ASSERT_TRUE(first.trimmed);
  EXPECT_GE(first.released_bytes, 100 * kMiB) << "the freed pages left the process";
  // Nothing new piled up: no second trim.
  const HeapTrimmer::Check second = trimmer.CheckNow();
  EXPECT_FALSE(second.trimmed);
  // The freed blocks are still there for reuse: the trim returned pages, not the heap's shape.
  EXPECT_GE(second.usage.free, 100 * kMiB);
  // A little more freed (below the threshold): still no trim.
  std::vector<char*> more = FragmentedHeap(256, 64 << 10);  // 16 MiB, 15 MiB freed
  EXPECT_FALSE(trimmer.CheckNow().trimmed);
  for (char* p : kept) free(p);
  for (char* p : more) free(p);
}

TEST(HeapTrimmerTest, ChecksOnItsIntervalAndStops) {
  std::atomic<int> checks{0};
  {
    HeapTrimmer trimmer({absl::Milliseconds(20), 32 * kMiB},
                        [&checks](const HeapTrimmer::Check& check) {
                          EXPECT_GT(check.resident_bytes, 0);
                          checks.fetch_add(1);
                        });
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (checks.load() < 3 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
    EXPECT_GE(checks.load(), 3);
  }
  const int after = checks.load();
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(checks.load(), after) << "no check after destruction";
  // No interval: no thread, no checks.
  HeapTrimmer idle({absl::ZeroDuration(), 0},
                   [&checks](const HeapTrimmer::Check&) { checks.fetch_add(1); });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(checks.load(), after);
}

}  // namespace
}  // namespace mnemo::util
