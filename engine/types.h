// Plain value types exchanged between the engine and its callers (server, tools).
#ifndef MNEMO_ENGINE_TYPES_H_
#define MNEMO_ENGINE_TYPES_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/model/exit_measure.h"

namespace mnemo::engine {

// Field names below match the mnemo.v1 proto fields; validation errors name them that way.
struct SamplingOptions {
  float temperature = 1.0f;         // 0 = greedy; must be >= 0
  int top_k = 0;                    // 0 = off; must be >= 0
  float top_p = 1.0f;               // in (0, 1]
  float repetition_penalty = 1.0f;  // > 0; 1 = off
  std::optional<uint64_t> seed;     // unset = drawn from the engine's entropy
  float min_p = 0.0f;               // in [0, 1]; 0 = off
  float presence_penalty = 0.0f;    // in [-2, 2]; 0 = off
  float frequency_penalty = 0.0f;   // in [-2, 2]; 0 = off
  std::map<int, float> logit_bias;  // token id in [0, vocab_size) -> finite bias
};

// kNN-LM interpolation with a datastore (docs/design.md §4). Unset fields take the datastore's
// defaults (`--datastore NAME=DIR,lambda=...`).
struct KnnLmOptions {
  std::string datastore;              // a --datastore NAME, or "session" (the session's own)
  std::optional<float> lambda;        // weight of p_kNN, in [0, 1]
  int k = 0;                          // neighbours; 0 = default, at most 1024
  std::optional<float> temperature;   // > 0, in squared-L2 units of the keys
};

// Recall from the sequence's own history (docs/recall.md): the continuation of the longest
// earlier context that matches the current one, mixed into each next-token distribution with a
// λ that grows with the matched length. Unset fields take the defaults (RecallOptions in
// engine/datastore/history_index.h).
struct RecallRequest {
  // Unset = on for a session created with remember, off otherwise. On for a one-shot request:
  // the request's own prompt (or text) is remembered as it is read.
  std::optional<bool> enabled;
  std::optional<float> max_lambda;     // in [0, 1]
  std::optional<int> min_match_bytes;  // >= 1
};

// CALM early exit (docs/design.md §5): each generated token leaves the network at the first layer
// whose confidence (by `measure`) reaches λ_t, the request's threshold relaxed along the
// output. Validation resolves both unset fields (the scheduler's ValidateGenerate).
struct EarlyExitOptions {
  bool enabled = false;
  std::optional<float> threshold;  // in (0, 1]; unset = the model's calibrated λ for `measure`
  // unset = the model's default measure (config.json exit_measure; softmax response unless set)
  std::optional<model::ExitMeasure> measure;
};

struct GenerateOptions {
  std::string session_id;  // empty = one-shot
  // The prompt, as text or as ids (at most one of them non-empty; both may be empty only with
  // a session). Text on a fresh sequence is primed with the tokenizer's BOS (when it has
  // one); ids are fed exactly as given, never primed.
  std::string prompt;                 // UTF-8
  std::vector<int> prompt_token_ids;  // each in [0, vocab_size)
  int max_new_tokens = 0;  // 0 = EngineConfig::default_max_new_tokens
  SamplingOptions sampling;
  std::vector<std::string> stop;  // non-empty strings
  // Ids that end generation when sampled (FinishReason::kStop; the token is emitted, like a
  // stop string's match). Each in [0, vocab_size).
  std::vector<int> stop_token_ids;
  int top_logprobs = 0;           // alternatives per token, 0..EngineConfig::max_top_logprobs
  bool stop_at_eos = true;
  std::optional<KnnLmOptions> knn_lm;
  EarlyExitOptions early_exit;
  RecallRequest recall;
};

struct TokenAlternative {
  int id = 0;
  std::string text;  // valid UTF-8 (U+FFFD for a lone byte)
  float logprob = 0;
};

struct TokenOutput {
  int id = 0;
  std::string text;   // the UTF-8 text this token completes ("" for a leading byte)
  std::string bytes;  // the token's raw bytes
  float logprob = 0;
  int exit_layer = 0;  // 1-based; = model layers when no early exit happened
  std::vector<TokenAlternative> top_logprobs;
};

enum class FinishReason { kLength, kStop, kEos, kCancelled, kError };

struct Usage {
  int prompt_tokens = 0;
  int generated_tokens = 0;
  int64_t session_tokens = 0;
};

// The last thing a GenerateStream carries. status is OK unless reason == kError or the request
// failed before it started (NOT_FOUND session, RESOURCE_EXHAUSTED, UNAVAILABLE...).
struct GenerateFinal {
  FinishReason reason = FinishReason::kError;
  Usage usage;
  absl::Status status;
  absl::Duration queue_time;  // from Submit to the first model work
};

struct ScoreOptions {
  std::string session_id;  // empty = one-shot
  // Exactly one of text and token_ids is non-empty. A fresh sequence's first token is scored
  // only when a BOS was primed in front of it (text, and a vocabulary with a BOS); ids are
  // never primed. A one-shot request's token_ids hold at least 2 ids.
  std::string text;             // UTF-8
  std::vector<int> token_ids;   // each in [0, vocab_size)
  bool update_memory = false;
  bool token_logprobs = false;
  std::optional<KnnLmOptions> knn_lm;
  RecallRequest recall;
};

struct ScoreResult {
  int64_t token_count = 0;   // tokens scored
  int64_t byte_count = 0;    // UTF-8 bytes the scored tokens stand for (Tokenizer::TokenBytes)
  double total_logprob = 0;  // natural log
  double bits_per_byte = 0;  // 0 when byte_count is 0
  std::vector<float> logprobs;  // per scored token, when asked for
};

struct TokenizeResult {
  std::vector<int> ids;
  std::vector<std::string> pieces;
};

struct CreateSessionOptions {
  std::string session_id;    // empty = generated
  int64_t knn_capacity = 0;  // kNN entries per head; 0 = the server default; <= the server cap
  // Remember every token read or generated, for recall (docs/recall.md).
  bool remember = false;
  int64_t remember_capacity = 0;  // tokens kept; 0 = the server default; <= the server cap
  absl::Duration ttl = absl::ZeroDuration();  // idle TTL; zero = the server's session_ttl
  bool pinned = false;  // never evicted nor expired (only DeleteSession removes it)
};

struct MemoryInfo {
  int64_t xl_tokens = 0;
  int64_t compressed_slots = 0;
  int64_t knn_entries = 0;
  int64_t remembered_tokens = 0;  // recall history (0 unless created with remember)
  int64_t bytes = 0;
};

struct SessionInfo {
  std::string session_id;
  std::string model;
  int64_t tokens_seen = 0;
  MemoryInfo memory;
  absl::Time create_time;
  absl::Time last_use_time;
  bool busy = false;
  absl::Duration ttl = absl::ZeroDuration();  // the session's own TTL; zero = the server's
  bool pinned = false;
};

struct ModelInfo {
  std::string name;
  std::string path;
  std::string family;  // the family's architecture ("mnemo-xl", ...)
  int layers = 0;
  int d_model = 0;
  int heads = 0;
  int vocab_size = 0;
  int64_t parameters = 0;
  int seg_len = 0;
  int mem_len = 0;
  int cmem_len = 0;
  int cmem_rate = 0;
  std::string compression;
  int clamp_len = 0;
  std::string tokenizer;     // Tokenizer::name()
  std::string dtype;         // of the weights on disk
  std::string weight_dtype;  // as loaded for serving (model::WeightDtypeName)
  std::string device;
  int window = 0;       // raw positions of context a token attends to
  int sink_tokens = 0;  // leading positions kept visible beyond the window
};

// A datastore as the Datastores service reports it.
struct DatastoreInfo {
  std::string name;
  bool session_private = false;  // a session's own store (name "session"), else shared
  std::string session_id;        // session_private only
  std::string dir;               // shared only
  std::string model;             // "name@fingerprint" of the model that made the keys
  std::string key_type;
  int d = 0;
  int64_t entries = 0;
  int64_t bytes = 0;
  std::string index_type;  // "flat", "ivfpq"; "exact" for a session's in-memory store
  int nlist = 0;
  int pq_m = 0;
  int pq_nbits = 0;
  std::string corpus;
  int64_t corpus_files = 0;
  int64_t corpus_bytes = 0;
  double build_seconds = 0;
  std::string built_at;
  // What requests that leave knn_lm fields unset get.
  float default_lambda = 0;
  int default_k = 0;
  float default_temperature = 0;
};

struct AddToDatastoreOptions {
  std::string session_id;
  std::string text;  // UTF-8, non-empty; one document, read with a fresh memory
};

struct AddToDatastoreResult {
  int64_t entries_added = 0;
  DatastoreInfo datastore;  // after the addition
};

struct EngineStats {
  int running = 0;   // requests being generated or scored
  int waiting = 0;   // requests queued behind them
  int sessions = 0;
  int64_t session_memory_bytes = 0;
  int64_t sessions_evicted_total = 0;  // by LRU or TTL (with --session_dir: LRU hibernates)
  int64_t sessions_on_disk = 0;        // with --session_dir: sessions in the directory
  // Sessions' private kNN-LM datastores, all together (their bytes are also in
  // session_memory_bytes).
  int64_t session_datastore_entries = 0;
  int64_t session_datastore_bytes = 0;
};

}  // namespace mnemo::engine

#endif  // MNEMO_ENGINE_TYPES_H_
