// Session and SequenceState: what one conversation/document stream remembers between requests.
//
// The whole state of a session, in one list (what durable sessions will serialise; keep it in
// step with the members below):
//   SequenceState::memory           every piece memory::SessionMemory::ForEachPiece lists: per
//                                   layer the raw and compressed key/value rings and the kNN
//                                   store; the slot maps, row starts and position counters
//   SequenceState::last_logprobs    the next-token distribution, last_knn_lm_key its kNN-LM key,
//   SequenceState::last_exit_layer  and the layer it came from
//   SequenceState::tokens_seen      text tokens fed (usage.session_tokens)
//   SequenceState::history          the recall index of every token fed (remember only)
//   Session::datastore              the private kNN-LM datastore (null until first added to)
//   Session::id, create_time        identity and age (last_use_time, last_use_seq: LRU order)
//   Session::ttl, pinned            its own expiry policy
// Not state worth keeping: busy (a request in flight; the scheduler's SessionQueue holds the
// ones waiting) and bytes (an accounting cache).
//
// Plain data owned by a SessionStore (sessions) or by a one-shot request (a bare
// SequenceState). No locks: one thread at a time touches a session, handed over by the
// scheduler's loop thread (docs/design.md §10): the loop thread itself, or for one iteration the
// decode worker its running task was lent to (a Generate's prompt chunk, a decode row's
// memory). The SessionStore's own fields (busy, bytes, LRU times) are the loop thread's.
#ifndef MNEMO_ENGINE_SESSION_SESSION_H_
#define MNEMO_ENGINE_SESSION_SESSION_H_

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "engine/datastore/history_index.h"
#include "engine/datastore/session_datastore.h"
#include "engine/memory/session_memory.h"

namespace mnemo::session {

// The model-side state of one sequence. Invariant: `last_logprobs` is the model's next-token
// distribution after every token fed into `memory` so far (BOS first, then text tokens).
struct SequenceState {
  memory::SessionMemory memory;
  // [vocab] float32 on CPU: log-probs of the next token. Undefined until the sequence is
  // primed by feeding BOS, which happens on first use (not at creation, so creating a session
  // costs no model work).
  torch::Tensor last_logprobs;
  // [d_model] float32 on CPU: the kNN-LM key of the position that produced last_logprobs
  // (the last layer's post-LayerNorm FFN input). Undefined only when that position exited
  // early (CALM) and no full-depth feed followed (a generation ended by EOS, a stop string or
  // cancellation); kNN-LM then leaves that one distribution as the model gave it.
  torch::Tensor last_knn_lm_key;
  // 1-based layer whose output gave last_logprobs (the model's depth unless the last token fed
  // exited early).
  int last_exit_layer = 0;
  // Text tokens fed so far (prompt, scored text with update_memory, generated tokens that were
  // sent to the client); the BOS primed before text is not counted, a request's token ids are
  // (as given, specials included). This is what usage.session_tokens reports.
  int64_t tokens_seen = 0;
  // Every token fed (BOS, text, generated), for recall (docs/recall.md); null unless the
  // session was created with remember, or a one-shot request asked for recall.
  std::unique_ptr<datastore::HistoryIndex> history;

  bool primed() const { return last_logprobs.defined(); }
  // A deep copy: the clone's memory can be extended without touching this one.
  SequenceState Clone() const {
    SequenceState copy;
    copy.memory = memory.Clone();
    copy.last_logprobs = last_logprobs;  // never modified in place, only replaced
    copy.last_knn_lm_key = last_knn_lm_key;
    copy.last_exit_layer = last_exit_layer;
    copy.tokens_seen = tokens_seen;
    if (history) copy.history = std::make_unique<datastore::HistoryIndex>(*history);
    return copy;
  }
};

struct Session {
  std::string id;
  SequenceState state;
  absl::Time create_time;
  absl::Time last_use_time;
  uint64_t last_use_seq = 0;  // orders uses that share a timestamp (LRU tie-break)
  // The session's own idle TTL (zero = the store's) and pin (never evicted nor expired).
  absl::Duration ttl = absl::ZeroDuration();
  bool pinned = false;
  // True while a request runs on this session; busy sessions are never evicted or deleted.
  // Set and cleared by the scheduler's SessionQueue, which also holds the requests waiting.
  bool busy = false;
  int64_t bytes = 0;  // memory bytes as last accounted by the SessionStore
  // The session's private kNN-LM datastore (Datastores.AddToSessionDatastore); null until
  // text is first added.
  std::unique_ptr<datastore::SessionDatastore> datastore;

  // Everything the session holds: its memory and its private datastore.
  int64_t held_bytes() const {
    return state.memory.bytes() + (datastore != nullptr ? datastore->bytes() : 0) +
           (state.history != nullptr ? state.history->bytes() : 0);
  }
};

}  // namespace mnemo::session

#endif  // MNEMO_ENGINE_SESSION_SESSION_H_
