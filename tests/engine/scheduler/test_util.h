// Helpers for scheduler and engine tests: a tiny random model and a stream collector.
#ifndef MNEMO_TESTS_ENGINE_SCHEDULER_TEST_UTIL_H_
#define MNEMO_TESTS_ENGINE_SCHEDULER_TEST_UTIL_H_

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/generate_stream.h"
#include "engine/model/model.h"
#include "engine/types.h"
#include "tests/engine/tiny_model.h"

namespace mnemo::testing {

inline model::ModelConfig TinyConfig() {
  model::ModelConfig c = TinyModelConfig();
  c.name = "tiny";
  c.seg_len = 16;
  c.mem_len = 16;
  c.cmem_len = 8;
  c.cmem_rate = 2;
  c.clamp_len = 64;
  return c;
}

inline std::unique_ptr<model::Model> TinyModel(uint64_t seed = 1) {
  return model::Model::Random(TinyConfig(), seed);
}

// Events seen across several streams, in the order the producer emitted them.
struct EventLog {
  struct Event {
    int stream;
    bool close;  // false: a token
  };
  absl::Mutex mu;
  std::vector<Event> events ABSL_GUARDED_BY(mu);

  void Add(int stream, bool close) {
    absl::MutexLock lock(&mu);
    events.push_back({stream, close});
  }
  std::vector<Event> Snapshot() {
    absl::MutexLock lock(&mu);
    return events;
  }
};

// Consumes a GenerateStream as the producer fills it (on the producer's thread).
class Collector {
 public:
  explicit Collector(EventLog* log = nullptr, int tag = 0) : log_(log), tag_(tag) {
    stream_ = std::make_shared<engine::GenerateStream>([this] { OnReady(); });
  }
  std::shared_ptr<engine::GenerateStream> stream() const { return stream_; }

  // Waits for Close; returns nullopt on timeout.
  std::optional<engine::GenerateFinal> Wait(absl::Duration timeout = absl::Seconds(60)) {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](std::optional<engine::GenerateFinal>* f) { return f->has_value(); },
                             &final_),
                         timeout);
    return final_;
  }
  // Waits until at least `n` tokens arrived (or Close).
  bool WaitTokens(size_t n, absl::Duration timeout = absl::Seconds(60)) {
    absl::MutexLock lock(&mu_);
    auto ready = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return tokens_.size() >= n || final_.has_value();
    };
    return mu_.AwaitWithTimeout(absl::Condition(&ready), timeout) && tokens_.size() >= n;
  }
  std::vector<engine::TokenOutput> tokens() {
    absl::MutexLock lock(&mu_);
    return tokens_;
  }
  std::vector<int> ids() {
    std::vector<int> out;
    for (const engine::TokenOutput& t : tokens()) out.push_back(t.id);
    return out;
  }
  std::string text() {
    absl::MutexLock lock(&mu_);
    return text_;
  }
  std::string bytes() {
    std::string out;
    for (const engine::TokenOutput& t : tokens()) out += t.bytes;
    return out;
  }

 private:
  void OnReady() {
    engine::GenerateStream::Pending pending = stream_->Take();
    absl::MutexLock lock(&mu_);
    for (auto& t : pending.tokens) {
      if (log_ != nullptr) log_->Add(tag_, false);
      tokens_.push_back(std::move(t));
    }
    text_ += pending.text;
    if (pending.final) {
      if (log_ != nullptr) log_->Add(tag_, true);
      final_ = std::move(pending.final);
    }
  }

  EventLog* const log_;
  const int tag_;
  std::shared_ptr<engine::GenerateStream> stream_;
  absl::Mutex mu_;
  std::vector<engine::TokenOutput> tokens_ ABSL_GUARDED_BY(mu_);
  std::string text_ ABSL_GUARDED_BY(mu_);
  std::optional<engine::GenerateFinal> final_ ABSL_GUARDED_BY(mu_);
};

// Turns a callback API into a blocking call.
template <typename T>
class Waiter {
 public:
  std::function<void(T)> Callback() {
    return [this](T value) {
      absl::MutexLock lock(&mu_);
      value_.emplace(std::move(value));
    };
  }
  T Wait(absl::Duration timeout = absl::Seconds(60)) {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return value_.has_value(); };
    if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) {
      std::fprintf(stderr, "Waiter: no callback within the timeout\n");
      std::abort();
    }
    return std::move(*value_);
  }

 private:
  absl::Mutex mu_;
  std::optional<T> value_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mnemo::testing

#endif  // MNEMO_TESTS_ENGINE_SCHEDULER_TEST_UTIL_H_
