// GenerateStream: the output channel of one Generate request, from the engine's loop thread
// (producer) to whoever streams it to the client (consumer, e.g. a gRPC reactor).
//
// Thread-safety: all methods are thread-safe. `on_ready` is called by the producer after each
// Push/Close without any lock held; it must not block (a reactor uses it to start a write when
// none is in flight). Invariant: Close() is called exactly once, after every Push().
#ifndef MNEMO_ENGINE_GENERATE_STREAM_H_
#define MNEMO_ENGINE_GENERATE_STREAM_H_

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "engine/types.h"

namespace mnemo::engine {

class GenerateStream {
 public:
  explicit GenerateStream(std::function<void()> on_ready = nullptr)
      : on_ready_(std::move(on_ready)) {}

  // Everything produced since the previous Take: consecutive tokens are coalesced, so a slow
  // consumer gets fewer, larger chunks.
  struct Pending {
    std::vector<TokenOutput> tokens;
    std::string text;                    // concatenated text deltas
    std::optional<GenerateFinal> final;  // set once, on the Take after Close
    bool empty() const { return tokens.empty() && text.empty() && !final; }
  };

  // Producer side.
  void Push(TokenOutput token, const std::string& text_delta) {
    {
      absl::MutexLock lock(&mu_);
      pending_.tokens.push_back(std::move(token));
      pending_.text += text_delta;
    }
    Notify();
  }
  // Text with no token of its own: the U+FFFD that ends a dangling partial UTF-8 sequence
  // when generation stops at EOS (the EOS token itself is never pushed).
  void PushText(const std::string& text_delta) {
    if (text_delta.empty()) return;
    {
      absl::MutexLock lock(&mu_);
      pending_.text += text_delta;
    }
    Notify();
  }
  void Close(GenerateFinal final) {
    {
      absl::MutexLock lock(&mu_);
      pending_.final = std::move(final);
    }
    Notify();
  }
  // True once the consumer asked to stop; the producer checks it every step.
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }

  // Consumer side.
  Pending Take() {
    absl::MutexLock lock(&mu_);
    Pending out = std::move(pending_);
    pending_ = Pending();
    return out;
  }
  void Cancel() { cancelled_.store(true, std::memory_order_release); }

 private:
  void Notify() {
    if (on_ready_) on_ready_();
  }

  const std::function<void()> on_ready_;
  std::atomic<bool> cancelled_{false};
  absl::Mutex mu_;
  Pending pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mnemo::engine

#endif  // MNEMO_ENGINE_GENERATE_STREAM_H_
