#include "engine/util/heap_trimmer.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <utility>

namespace mnemo::util {

HeapUsage ReadHeapUsage() {
  const struct mallinfo2 info = mallinfo2();
  HeapUsage usage;
  // uordblks: in use in the arenas; hblkhd: in use in blocks mmapped on their own (freed
  // ones are unmapped at once, so they never count as free).
  usage.in_use = static_cast<int64_t>(info.uordblks + info.hblkhd);
  usage.free = static_cast<int64_t>(info.fordblks);
  return usage;
}

int64_t ResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  long long size = 0, resident = 0;
  const int read = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  if (read != 2) return 0;
  return static_cast<int64_t>(resident) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

HeapTrimmer::Check HeapTrimmer::CheckNow() {
  Check check;
  check.usage = ReadHeapUsage();
  check.resident_bytes = ResidentBytes();
  const int64_t slack = check.resident_bytes - check.usage.in_use;
  const bool due = slack_after_trim_ < 0 ? check.usage.free > options_.min_free_bytes
                                         : slack - slack_after_trim_ > options_.min_free_bytes;
  if (!due) return check;
  const absl::Time start = absl::Now();
  malloc_trim(0);
  check.took = absl::Now() - start;
  check.trimmed = true;
  const int64_t resident_after = ResidentBytes();
  check.released_bytes = check.resident_bytes - resident_after;
  slack_after_trim_ = resident_after - ReadHeapUsage().in_use;
  return check;
}

HeapTrimmer::HeapTrimmer(Options options, Observer observer)
    : options_(options), observer_(std::move(observer)) {
  if (options_.interval > absl::ZeroDuration()) thread_ = std::thread([this] { Run(); });
}

HeapTrimmer::~HeapTrimmer() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void HeapTrimmer::Run() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.interval)) return;
    }
    const Check check = CheckNow();
    if (observer_) observer_(check);
  }
}

}  // namespace mnemo::util
