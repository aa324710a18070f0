// HeapTrimmer: hands the heap's freed memory back to the kernel while a server runs.
//
// glibc keeps freed blocks for reuse, and ConfigureCpuRuntime raises its trim and mmap
// thresholds so that decode steps do not fault in fresh pages (cpu_backend.cc). Under a
// long, varied load (many threads allocating in many arenas, sessions and one-shot memories
// of every size coming and going) the free memory kept grows: +14.7% RSS over a 10-minute,
// 256-stream soak, while the memory in use stayed flat (docs/results/hardening.md).
//
// Every `interval` a thread compares the resident memory the heap does not use (RSS minus the
// bytes in use, mallinfo2) with what it was after the last trim, and when it has grown by more
// than `min_free_bytes` (the first time: when the allocator holds that much free) calls
// malloc_trim(0), which returns the free pages of every arena, not only the top of the main
// heap, and keeps the blocks themselves for reuse. Each check is reported to `observer`: the
// heap's usage and, when it trimmed, how long that took and how much RSS it gave back.
//
// Thread-safety: construct and destroy on one thread; the observer runs on the trimmer's
// thread.
#ifndef MNEMO_ENGINE_UTIL_HEAP_TRIMMER_H_
#define MNEMO_ENGINE_UTIL_HEAP_TRIMMER_H_

#include <cstdint>
#include <functional>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace mnemo::util {

// What the allocator holds (glibc's mallinfo2), in bytes.
struct HeapUsage {
  int64_t in_use = 0;  // allocated and not freed
  int64_t free = 0;    // freed, kept by the allocator (resident or not)
};
HeapUsage ReadHeapUsage();

// This process's resident set size, in bytes (/proc/self/statm); 0 if unreadable.
int64_t ResidentBytes();

class HeapTrimmer {
 public:
  struct Options {
    absl::Duration interval = absl::Seconds(10);  // <= 0: no thread, nothing trimmed
    int64_t min_free_bytes = int64_t{64} << 20;   // trim when this much more is kept free
  };
  struct Check {
    HeapUsage usage;             // before any trim
    int64_t resident_bytes = 0;  // RSS before any trim
    bool trimmed = false;
    absl::Duration took;         // of the trim
    int64_t released_bytes = 0;  // RSS before the trim minus after (may be <= 0)
  };
  using Observer = std::function<void(const Check&)>;

  HeapTrimmer(Options options, Observer observer);
  ~HeapTrimmer();  // stops the thread (at most one trim's wait)

  HeapTrimmer(const HeapTrimmer&) = delete;
  HeapTrimmer& operator=(const HeapTrimmer&) = delete;

  // One check (and trim, if due), as the thread does it every interval; for tests and for a
  // trimmer built with no interval. Not to be called while the thread runs.
  Check CheckNow();

 private:
  void Run();

  const Options options_;
  const Observer observer_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t slack_after_trim_ = -1;  // RSS minus in use after the last trim; -1: none yet
  std::thread thread_;
};

}  // namespace mnemo::util

#endif  // MNEMO_ENGINE_UTIL_HEAP_TRIMMER_H_
