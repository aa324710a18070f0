// Engine: the facade the server (and tools) talk to. Knows nothing of gRPC or protobuf.
//
// Owns the model, every session and the scheduler's loop thread. Exactly two things cross
// threads: the request queue in (every public method enqueues work), and a per-request output
// channel out (GenerateStream for Generate, a completion callback for everything else).
//
// Thread-safety: every public method may be called from any thread and never blocks on model
// work. Completion callbacks run on the engine's loop thread, except that with session_dir a
// call that changed a session is delivered (callback, or the stream's Close) from the session
// journal's writer thread once its change is on disk. They must not block.
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
#include "absl/types/span.h"
#include "engine/generate_stream.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/types.h"

namespace mnemo::scheduler {
class Scheduler;
}  // namespace mnemo::scheduler
namespace mnemo::datastore {
class DatastoreCatalog;
}  // namespace mnemo::datastore

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
  int max_running = 64;                 // requests advanced together; more wait (max_waiting)
  bool batch_decode = true;             // one batched decode step per iteration (see Scheduler)
  // Threads a batched decode step's rows are split across (model::ParallelDecoder), each shard
  // on one core; 1 = one step whose large products split their columns over `threads`. 0 = by
  // the weights a decode step streams (scheduler/thread_plan.h): the cores for a cache-resident
  // model like the bundled one, 1 for a large one. config() reports the number chosen.
  int decode_threads = 0;
  // OpenMP threads for prefill (prompt, Score and datastore chunks of <= seg_len tokens) on the
  // loop thread; 0 = `threads`; -1 = by the model (thread_plan.h): 1 for a small one (waking a
  // second thread for each of a chunk's ~100 ops costs more than it saves on small chunks:
  // bundled model, 2 cores, a 64-token prompt 10.5 ms on one thread vs 15.8 ms on two; 256
  // tokens 50.0 vs 48.9 ms; and a second prefill thread competes with the decode shards),
  // `threads` for a large one.
  int prefill_threads = -1;
  int max_prefill_tokens = 512;         // prefill tokens per iteration beyond the first chunk
  // Called (on the loop thread, must not block) with the row count of every batched decode
  // step; may be empty.
  std::function<void(int)> decode_batch_observer;
  // Per-session kNN memory, entries per head: the size of sessions that ask for 0 (and of
  // one-shot requests), the largest a CreateSession may ask for, and the size up to which
  // search is exact (FAISS IVF beyond it).
  int64_t knn_capacity = 65536;
  int64_t max_knn_capacity = int64_t{1} << 20;
  int64_t knn_exact_threshold = 16384;
  // Recall history (docs/recall.md), tokens: the size of sessions created with remember that
  // ask for 0 (and of one-shot requests with recall on), and the largest a CreateSession may
  // ask for.
  int64_t remember_capacity = int64_t{1} << 20;
  int64_t max_remember_capacity = int64_t{1} << 24;
  // Durable sessions (docs/durability.md): the directory of their snapshots and logs, shared
  // by replicas that may serve the same sessions; empty = sessions live in memory only. A
  // session's log is folded into a new snapshot once it passes session_log_compact_bytes.
  std::string session_dir;
  // With session_dir: idle sessions leave memory (and release their lock for other replicas)
  // after this long; infinite = only when the limits need room.
  absl::Duration session_hibernate_after = absl::InfiniteDuration();
  absl::Duration max_session_ttl = absl::Hours(24 * 365);  // largest CreateSession ttl
  int64_t session_log_compact_bytes = int64_t{64} << 20;
  // Called on the thread that did the work (must not block): a snapshot written (its time and
  // bytes), a session loaded from disk (its time), a log record appended (its bytes).
  std::function<void(absl::Duration, int64_t)> session_snapshot_observer;
  std::function<void(absl::Duration)> session_restore_observer;
  std::function<void(int64_t)> session_log_observer;
  // Element type of the sessions' attention memory (raw and compressed keys/values): "float32"
  // (the model's) or "float16" (half the bytes per session and of what decode attention reads;
  // CPU only; docs/results/kv_dtype.md).
  std::string kv_dtype = "float32";
  // How the decode products hold the model's weights: "float32"; "float16" (the weights
  // rounded to float16 at load: half the bytes a decode step streams); or "bfloat16" (weights
  // and each product's inputs rounded to bfloat16: bfloat16 dot products, AVX512-BF16 where
  // the CPU has it). CPU only; docs/results/weight_dtype.md.
  std::string weight_dtype = "float32";
  // Bounded sessions for the Hugging Face families (model::LoadOptions::window, ::sink_tokens;
  // docs/user-guide.md "Bounded sessions"): a query sees its last `window` positions plus the
  // first `sink_tokens` of its sequence. 0 / -1 = the model's own.
  int window = 0;
  int sink_tokens = -1;
  // Shared kNN-LM datastores, as `--datastore` values: NAME=DIR[,lambda=L][,k=K]
  // [,temperature=T][,nprobe=N]. Each must have been built for this model.
  std::vector<std::string> datastores;
  // Entries a session's private datastore may hold; 0 = unbounded.
  int64_t max_session_datastore_entries = int64_t{1} << 20;
  // Called (on the loop thread, must not block) with the wall time of every kNN-LM datastore
  // search; may be empty.
  std::function<void(absl::Duration)> knn_search_observer;
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
  using AddToDatastoreDone = std::function<void(absl::StatusOr<AddToDatastoreResult>)>;
  using DatastoreDone = std::function<void(absl::StatusOr<DatastoreInfo>)>;

  // True once the caller has given up on a Score or AddToSessionDatastore (its client
  // cancelled, its deadline passed); any thread, until `done` runs. The request then ends
  // CANCELLED at its next step instead of reading the rest of its text.
  using CancelCheck = std::function<bool()>;

  // Each runs `done` exactly once, on the loop thread (or inline when validation fails; with
  // session_dir, a call that changed a session on the journal's writer thread).
  void Score(ScoreOptions options, ScoreDone done, CancelCheck cancelled = {});
  void CreateSession(CreateSessionOptions options, SessionDone done);
  void GetSession(std::string session_id, SessionDone done);
  void ListSessions(ListDone done);  // sorted by session id
  void DeleteSession(std::string session_id, StatusDone done);
  // Moving sessions (docs/durability.md; Scheduler::ExportSession and the rest): a session as
  // snapshot bytes, a new session from them (`session_id` empty = the exported id), a copy
  // under a new id (empty = generated).
  using BytesDone = std::function<void(absl::StatusOr<std::string>)>;
  void ExportSession(std::string session_id, BytesDone done);
  void ImportSession(std::string session_id, std::string snapshot, SessionDone done);
  void ForkSession(std::string session_id, std::string new_session_id, SessionDone done);
  // Reads `options.text` with a fresh memory and appends one entry per token to the session's
  // private datastore (knn_lm.datastore = "session"); model work, queued like Score.
  void AddToSessionDatastore(AddToDatastoreOptions options, AddToDatastoreDone done,
                             CancelCheck cancelled = {});
  // name "session" + session_id: that session's private datastore (through the loop thread);
  // any other name: a shared datastore (answered inline). NOT_FOUND for unknown names.
  void GetDatastore(std::string name, std::string session_id, DatastoreDone done);

  // Shared datastores, sorted by name. Synchronous; any thread.
  std::vector<DatastoreInfo> ListDatastores() const;

  // Pure and synchronous; any thread.
  // The ids of `text` (UTF-8); with add_special_tokens, preceded by the tokenizer's BOS when
  // it has one (the ids a text prompt is fed as on a fresh sequence).
  absl::StatusOr<TokenizeResult> Tokenize(const std::string& text,
                                          bool add_special_tokens = false) const;
  // The text `ids` stand for (invalid UTF-8 reads as U+FFFD). Specials are left out with
  // skip_special_tokens, else written as markers ("<|bos|>", "<|eos|>", "<|pad|>",
  // "<|special:ID|>"). INVALID_ARGUMENT naming ids[i] for an id outside [0, vocab_size).
  absl::StatusOr<std::string> Detokenize(absl::Span<const int> ids,
                                         bool skip_special_tokens) const;
  const ModelInfo& model_info() const { return model_info_; }
  const EngineConfig& config() const { return config_; }
  // A snapshot of gauges the loop thread keeps up to date.
  EngineStats Stats() const;

 private:
  Engine(EngineConfig config, ModelInfo info,
         std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
         std::shared_ptr<const datastore::DatastoreCatalog> datastores,
         std::unique_ptr<scheduler::Scheduler> scheduler);

  const EngineConfig config_;
  const ModelInfo model_info_;
  // The model's tokenizer (immutable, any thread), shared so that Tokenize needs no model work.
  const std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  // Immutable; shared with the scheduler. Declared before it, so destroyed after it.
  const std::shared_ptr<const datastore::DatastoreCatalog> datastores_;
  std::unique_ptr<scheduler::Scheduler> scheduler_;  // owns the loop thread, the model and the sessions
};

}  // namespace mnemo::engine

#endif  // MNEMO_ENGINE_ENGINE_H_
