#include "engine/util/worker_pool.h"

#include <algorithm>

namespace mnemo::util {

WorkerPool::WorkerPool(int workers) : slots_(std::max(0, workers)) {
  for (int w = 0; w < static_cast<int>(slots_.size()); ++w) {
    workers_.emplace_back([this, w] { WorkerLoop(w); });
  }
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void WorkerPool::WorkerLoop(int worker) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_ready_.wait(lock, [&] { return stopping_ || slots_[worker].pending; });
    if (stopping_) return;
    const absl::FunctionRef<void(int)>* job = slots_[worker].job;
    lock.unlock();
    std::exception_ptr error;
    try {
      (*job)(worker);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    slots_[worker].error = error;
    slots_[worker].job = nullptr;
    slots_[worker].pending = false;
    work_done_.notify_all();
  }
}

void WorkerPool::Run(int count, absl::FunctionRef<void(int worker)> job,
                     absl::FunctionRef<void()> on_caller) {
  count = std::clamp(count, 0, size());
  if (count > 0) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int w = 0; w < count; ++w) {
        slots_[w].job = &job;
        slots_[w].error = nullptr;
        slots_[w].pending = true;
      }
    }
    work_ready_.notify_all();
  }
  std::exception_ptr error;
  try {
    on_caller();
  } catch (...) {
    error = std::current_exception();
  }
  if (count > 0) {  // the workers hold `job` and what it borrows: wait for them in any case
    std::unique_lock<std::mutex> lock(mu_);
    work_done_.wait(lock, [&] {
      return std::none_of(slots_.begin(), slots_.begin() + count,
                          [](const Slot& slot) { return slot.pending; });
    });
    for (int w = 0; w < count; ++w) {
      if (error == nullptr) error = slots_[w].error;
      slots_[w].error = nullptr;
    }
  }
  if (error != nullptr) std::rethrow_exception(error);
}

}  // namespace mnemo::util
