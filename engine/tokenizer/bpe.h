// BpeModel: the `tokenizers` library's BPE model: a vocabulary of token strings, a ranked
// list of merges, and the merge loop that turns one pre-token ("word") into ids.
//
// A word starts as its characters (UTF-8 sequences), each looked up in the vocabulary; a
// character outside it becomes its <0xNN> byte tokens (byte_fallback) or the unknown token
// (consecutive ones fused into one with fuse_unk), or is dropped when there is neither, as
// `tokenizers` does. Then the adjacent pair with the lowest merge rank (leftmost among equals)
// is merged until no pair has a merge: a heap of candidate pairs over a linked list of symbols,
// O(n log n) per word. With ignore_merges a word that is itself in the vocabulary is one token.
//
// Immutable after Create: Tokenize may be called from any thread at once.
#ifndef MNEMO_ENGINE_TOKENIZER_BPE_H_
#define MNEMO_ENGINE_TOKENIZER_BPE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace mnemo::tokenizer {

struct BpeConfig {
  std::vector<std::pair<std::string, int>> vocab;           // token string -> id
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  std::optional<std::string> unk_token;                     // must be in vocab when set
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool ignore_merges = false;
};

class BpeModel {
 public:
  // INVALID_ARGUMENT naming the offending entry: a duplicate id, a merge whose parts or result
  // are not in the vocabulary, an unknown unk_token.
  static absl::StatusOr<BpeModel> Create(BpeConfig config);

  // Appends the ids of `word` to `out`.
  void Tokenize(std::string_view word, std::vector<int>& out) const;

  // The vocabulary id of `token`, or -1.
  int TokenToId(std::string_view token) const;
  // The token string of `id` ("" when the model has no such id).
  const std::string& IdToToken(int id) const;
  // One more than the largest id.
  int size() const { return static_cast<int>(id_to_token_.size()); }

 private:
  struct Merge {
    int rank;
    int result;  // the merged token's id
  };
  static uint64_t PairKey(int left, int right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  // The initial symbols of `word` (before any merge), as ids.
  void InitialSymbols(std::string_view word, std::vector<int>& symbols) const;
  // Merges `symbols` in place (the merge loop).
  void MergeAll(std::vector<int>& symbols) const;

  absl::flat_hash_map<std::string, int> token_to_id_;
  std::vector<std::string> id_to_token_;
  absl::flat_hash_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank, result
  int byte_ids_[256] = {};                       // <0xNN> ids; -1 where absent (byte_fallback)
  int unk_id_ = -1;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
};

}  // namespace mnemo::tokenizer

#endif  // MNEMO_ENGINE_TOKENIZER_BPE_H_
