// Engine: the facade the server (and tools) talk to. Knows nothing of gRPC or protobuf.
//
// Owns the model, every session and the scheduler's loop thread. Exactly two things cross
// threads: the request queue in (every public method enqueues work), and a per-request output
// channel out (GenerateStream for Generate, a completion callback for everything else).
//
// Thread-safety: every public method may be called from any thread and never blocks on model
// work. Completion callbacks run on the engine's loop thread and must not block.
#ifndef MNEMO_ENGINE_ENGINE_H_
#define MNEMO_ENGINE_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/generate_stream.h"
#include "engine/types.h"

namespace mnemo::scheduler {
class Scheduler;
}  // namespace mnemo::scheduler

namespace mnemo::engine {

struct EngineConfig {
  std::string model_dir;
  std::string device = "cpu";           // "cpu", "cuda", "cuda:1"
  int threads = 0;                      // LibTorch intra-op threads; 0 = number of cores
  int max_sessions = 1024;              // beyond it the least recently used idle session goes
  absl::Duration session_ttl = absl::Hours(1);  // idle sessions older than this are deleted
  int64_t max_memory_bytes = int64_t{8} << 30;  // all sessions' memory; LRU eviction beyond
  int default_max_new_tokens = 256;     // when a request says 0
  int max_new_tokens_cap = 4096;        // above it a request is INVALID_ARGUMENT
  int max_top_logprobs = 20;
  int max_waiting = 1024;               // queued requests; beyond it RESOURCE_EXHAUSTED
  // Per-session kNN memory, entries per head: the size of sessions that ask for 0 (and of
  // one-shot requests), the largest a CreateSession may ask for, and the size up to which
  // search is exact (FAISS IVF beyond it).
  int64_t knn_capacity = 65536;
  int64_t max_knn_capacity = int64_t{1} << 20;
  int64_t knn_exact_threshold = 16384;
};

class Engine {
 public:
  // Loads the model and starts the loop thread. NOT_FOUND / INVALID_ARGUMENT / DATA_LOSS
  // name the file or tensor at fault when the model directory is bad.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineConfig& config);
  ~Engine();  // Cancels outstanding work (each stream still gets its Close) and joins the loop.

  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates `options` and queues the request. On an error nothing is queued and `stream`
  // is untouched. On OK the engine owns delivering exactly one stream->Close(), whatever
  // happens (NOT_FOUND for an unknown session arrives that way). Cancel through the stream.
  absl::Status Submit(GenerateOptions options, std::shared_ptr<GenerateStream> stream);

  using ScoreDone = std::function<void(absl::StatusOr<ScoreResult>)>;
  using SessionDone = std::function<void(absl::StatusOr<SessionInfo>)>;
  using ListDone = std::function<void(absl::StatusOr<std::vector<SessionInfo>>)>;
  using StatusDone = std::function<void(absl::Status)>;

  // Each runs `done` exactly once, on the loop thread (or inline when validation fails).
  void Score(ScoreOptions options, ScoreDone done);
  void CreateSession(CreateSessionOptions options, SessionDone done);
  void GetSession(std::string session_id, SessionDone done);
  void ListSessions(ListDone done);  // sorted by session id
  void DeleteSession(std::string session_id, StatusDone done);

  // Pure and synchronous; any thread.
  absl::StatusOr<TokenizeResult> Tokenize(const std::string& text) const;
  const ModelInfo& model_info() const { return model_info_; }
  const EngineConfig& config() const { return config_; }
  // A snapshot of gauges the loop thread keeps up to date.
  EngineStats Stats() const;

 private:
  Engine(EngineConfig config, ModelInfo info, std::unique_ptr<scheduler::Scheduler> scheduler);

  const EngineConfig config_;
  const ModelInfo model_info_;
  std::unique_ptr<scheduler::Scheduler> scheduler_;  // owns the loop thread, the model and the sessions
};

}  // namespace mnemo::engine

#endif  // MNEMO_ENGINE_ENGINE_H_
