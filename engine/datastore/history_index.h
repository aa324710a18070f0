// HistoryIndex: a session's own history as a kNN-LM datastore with an exact-context distance
// (issue 24, docs/recall.md). Every token the session reads or generates is one entry: key = the
// context before it, value = the token. A query asks what followed the earlier contexts that
// share the longest suffix with the current one; the answer is a small next-token
// distribution (p_recall) and the matched length, from which MixRecall sets λ.
//
// Why not the model's kNN-LM key: measured on the bundled model, the nearest neighbours of the
// last layer's state at `PASSKEY = "` are other string openings in the filler, not the passkey's
// definition (docs/results/recall.md): the state says what kind of token comes next, not
// which context this is. Recall needs the context itself.
//
// Structure: the tokens in a ring of `capacity` (older ones are forgotten), and for each of a
// few context lengths ℓ a hash table from the hash of ℓ tokens to the most recent position it
// preceded, with a chain to the previous position of the same bucket. Append and Query are
// O(ℓ) each (plus a bounded chain walk), independent of how much is remembered, so the cost per
// token stays flat from 1K to 1M tokens. Memory: 29 bytes per remembered token (token, byte
// length, a chain link per length) and the tables' heads, sized once for the capacity (12 bytes
// per token of capacity, at least 24 KB). Not thread-safe (it lives in a SequenceState).
#ifndef MNEMO_ENGINE_DATASTORE_HISTORY_INDEX_H_
#define MNEMO_ENGINE_DATASTORE_HISTORY_INDEX_H_

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/util/binary_io.h"

namespace mnemo::datastore {

// What followed the best-matching earlier contexts.
struct RecallPrediction {
  int64_t match_tokens = 0;  // length of the longest matching context, in tokens (0 = none)
  int64_t match_bytes = 0;   // the same context in bytes (specials count 1)
  // (token, count) over the earlier occurrences of that longest context, most common first.
  std::vector<std::pair<int, int>> next;
  int occurrences = 0;  // sum of the counts
};

class HistoryIndex {
 public:
  // Context lengths (tokens) with a hash table; a match is found through the longest of them
  // that matches, then measured exactly (up to kMaxMatch tokens).
  static constexpr std::array<int, 3> kLengths = {3, 8, 24};
  static constexpr int kMaxMatch = 256;
  static constexpr int kMaxOccurrences = 32;  // chain entries examined per query

  // Remembers the last `capacity` tokens (>= 1).
  explicit HistoryIndex(int64_t capacity);

  // Appends one token; `bytes` is its length as text (clamped to 255; 1 for specials).
  void Append(int token, int bytes);

  // The continuation of the earlier contexts that share the longest suffix with everything
  // appended so far.
  RecallPrediction Query() const;

  // Durable sessions (docs/durability.md): the whole index, and back into an index of the same
  // capacity (FAILED_PRECONDITION otherwise, DATA_LOSS for damaged bytes); afterwards Query
  // answers exactly as the written index's would.
  void WriteTo(util::BinaryWriter& out) const;
  absl::Status ReadFrom(util::BinaryReader& in);
  // The token and byte length appended at `position` (oldest() <= position < appended()).
  int TokenAt(int64_t position) const { return token_at(position); }
  int BytesAt(int64_t position) const { return bytes_[position % capacity_]; }

  int64_t size() const { return next_ < capacity_ ? next_ : capacity_; }  // tokens remembered
  int64_t appended() const { return next_; }                                // tokens ever appended
  int64_t capacity() const { return capacity_; }
  int64_t bytes() const;  // allocated

 private:
  int64_t oldest() const { return next_ - size(); }
  int token_at(int64_t position) const { return tokens_[position % capacity_]; }
  uint64_t HashEndingAt(int64_t end, int length) const;  // tokens [end - length, end)
  // Exact length of the common suffix of the contexts ending at a and b (a < b), capped.
  int64_t CommonSuffix(int64_t a, int64_t b) const;

  int64_t capacity_;
  uint64_t bucket_mask_;
  int64_t next_ = 0;
  std::vector<int32_t> tokens_;  // [capacity] ring
  std::vector<uint8_t> bytes_;   // [capacity] ring
  // Per length: heads[bucket] = latest position whose preceding ℓ tokens hash there (-1 none);
  // chain[position % capacity] = the previous position of the same bucket.
  std::array<std::vector<int64_t>, kLengths.size()> heads_;
  std::array<std::vector<int64_t>, kLengths.size()> chain_;
};

// How a RecallPrediction is mixed into the model's next-token distribution.
struct RecallOptions {
  float max_lambda = 0.9f;    // λ for a long, unanimous match
  int min_match_bytes = 8;    // shorter matches are not used (λ = 0)
  int full_match_bytes = 16;  // ramp = (matched - min + 1) / (full - min): 1 from full - 1 bytes
};

// λ for a prediction: 0 below min_match_bytes, rising linearly to max_lambda at
// full_match_bytes - 1, times the share of the most common continuation (earlier occurrences that
// disagree lower confidence).
float RecallLambda(const RecallPrediction& prediction, const RecallOptions& options);

// In place over `logprobs` (the model's next-token log-probabilities, one per vocabulary id):
// log(λ p_recall(y) + (1 - λ) p_LM(y)). λ = 0 leaves them unchanged. Returns λ.
float MixRecall(absl::Span<float> logprobs, const RecallPrediction& prediction,
                const RecallOptions& options);

}  // namespace mnemo::datastore

#endif  // MNEMO_ENGINE_DATASTORE_HISTORY_INDEX_H_
