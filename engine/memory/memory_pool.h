// MemoryPool: emptied memories of finished sequences, kept for the next sequence of the same
// shape, so that a one-shot request does not allocate and zero-fill a fresh memory (~7.7 MB of
// rings for the bundled model) every time.
//
// Owns up to `capacity` SessionMemory objects, each emptied (SessionMemory::Clear, which zeroes
// only what its sequence wrote) and equal, bit for bit, to a fresh SessionMemory::Create of its
// shape and options. Thread-safe: Take and Give may be called from any thread (the engine's
// loop thread gives finished requests' memories back while worker threads prefill requests
// that take theirs); a mutex guards the list, and the Clear runs outside it.
#ifndef MNEMO_ENGINE_MEMORY_MEMORY_POOL_H_
#define MNEMO_ENGINE_MEMORY_MEMORY_POOL_H_

#include <torch/types.h>

#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "engine/memory/memory_shape.h"
#include "engine/memory/session_memory.h"

namespace mnemo::memory {

class MemoryPool {
 public:
  static constexpr int kDefaultCapacity = 4;
  explicit MemoryPool(int capacity = kDefaultCapacity) : capacity_(capacity) {}
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  // A held memory of exactly `shape`, on `device` with rings of `dtype` (as Create was given),
  // taken out of the pool; nullopt when none is held.
  std::optional<SessionMemory> Take(const MemoryShape& shape, const torch::Device& device,
                                    torch::ScalarType dtype);
  // Takes back a memory its sequence no longer needs: emptied and kept, or freed when the pool
  // is full. A placeholder (SessionMemory(), or moved from), a torn memory or one with a write
  // open is dropped.
  void Give(SessionMemory memory);

  // Memories held now.
  int size() const;
  int capacity() const { return capacity_; }

 private:
  const int capacity_;
  mutable absl::Mutex mu_;
  std::vector<SessionMemory> held_ ABSL_GUARDED_BY(mu_);  // each Clear()ed; <= capacity_
};

}  // namespace mnemo::memory

#endif  // MNEMO_ENGINE_MEMORY_MEMORY_POOL_H_
