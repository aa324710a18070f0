#include "engine/memory/memory_pool.h"

#include <utility>

namespace mnemo::memory {

std::optional<SessionMemory> MemoryPool::Take(const MemoryShape& shape,
                                              const torch::Device& device,
                                              torch::ScalarType dtype) {
  absl::MutexLock lock(&mu_);
  for (auto it = held_.begin(); it != held_.end(); ++it) {
    if (it->shape() == shape && it->device() == device && it->dtype() == dtype) {
      SessionMemory memory = std::move(*it);
      held_.erase(it);
      return memory;
    }
  }
  return std::nullopt;
}

void MemoryPool::Give(SessionMemory memory) {
  if (memory.num_layers() == 0 || memory.torn() || memory.write_open()) return;  // dropped
  {
    absl::MutexLock lock(&mu_);
    if (static_cast<int>(held_.size()) >= capacity_) return;  // freed here
  }
  memory.Clear();  // outside the lock: it zeroes what the sequence wrote
  absl::MutexLock lock(&mu_);
  if (static_cast<int>(held_.size()) < capacity_) held_.push_back(std::move(memory));
}

int MemoryPool::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(held_.size());
}

}  // namespace mnemo::memory
