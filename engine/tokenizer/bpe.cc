#include "engine/tokenizer/bpe.h"

#include <queue>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace mnemo::tokenizer {
namespace {

// The length of the UTF-8 sequence that starts with `lead` (1 for a stray byte, so that any
// input advances).
size_t CharLength(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

const std::string& EmptyString() {
  static const std::string* const empty = new std::string();
  return *empty;
}

}  // namespace

absl::StatusOr<BpeModel> BpeModel::Create(BpeConfig config) {
  BpeModel model;
  model.token_to_id_.reserve(config.vocab.size());
  int max_id = -1;
  for (const auto& [token, id] : config.vocab) {
    if (id < 0)
      return absl::InvalidArgumentError(absl::StrCat("token \"", token, "\" has id ", id));
    max_id = std::max(max_id, id);
  }
  model.id_to_token_.assign(max_id + 1, std::string());
  std::vector<bool> seen(max_id + 1, false);
  for (auto& [token, id] : config.vocab) {
    if (seen[id]) return absl::InvalidArgumentError(absl::StrCat("id ", id, " appears twice"));
    seen[id] = true;
    model.token_to_id_.emplace(token, id);
    model.id_to_token_[id] = std::move(token);
  }
  model.merges_.reserve(config.merges.size());
  for (size_t rank = 0; rank < config.merges.size(); ++rank) {
    const auto& [left, right] = config.merges[rank];
    const int left_id = model.TokenToId(left);
    const int right_id = model.TokenToId(right);
    const int result_id = model.TokenToId(absl::StrCat(left, right));
    if (left_id < 0 || right_id < 0 || result_id < 0) {
      return absl::InvalidArgumentError(absl::StrCat("merge ", rank, " (\"", left, "\" \"", right,
                                                     "\"): \"",
                                                     left_id < 0    ? left
                                                     : right_id < 0 ? right
                                                                    : absl::StrCat(left, right),
                                                     "\" is not in the vocabulary"));
    }
    // A repeated pair keeps its first (best) rank.
    model.merges_.try_emplace(PairKey(left_id, right_id), Merge{static_cast<int>(rank), result_id});
  }
  if (config.unk_token.has_value()) {
    model.unk_id_ = model.TokenToId(*config.unk_token);
    if (model.unk_id_ < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("unk_token \"", *config.unk_token, "\" is not in the vocabulary"));
    }
  }
  for (int byte = 0; byte < 256; ++byte) {
    model.byte_ids_[byte] = model.TokenToId(absl::StrFormat("<0x%02X>", byte));
  }
  model.byte_fallback_ = config.byte_fallback;
  model.fuse_unk_ = config.fuse_unk;
  model.ignore_merges_ = config.ignore_merges;
  return model;
}

int BpeModel::TokenToId(std::string_view token) const {
  auto it = token_to_id_.find(absl::string_view(token.data(), token.size()));
  return it == token_to_id_.end() ? -1 : it->second;
}

const std::string& BpeModel::IdToToken(int id) const {
  return id >= 0 && id < size() ? id_to_token_[id] : EmptyString();
}

void BpeModel::InitialSymbols(std::string_view word, std::vector<int>& symbols) const {
  bool last_was_unk = false;
  for (size_t i = 0; i < word.size();) {
    const size_t len = std::min(CharLength(static_cast<unsigned char>(word[i])), word.size() - i);
    const std::string_view ch = word.substr(i, len);
    i += len;
    if (const int id = TokenToId(ch); id >= 0) {
      symbols.push_back(id);
      last_was_unk = false;
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char b : ch) all = all && byte_ids_[static_cast<unsigned char>(b)] >= 0;
      if (all) {
        for (char b : ch) symbols.push_back(byte_ids_[static_cast<unsigned char>(b)]);
        last_was_unk = false;
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (!(fuse_unk_ && last_was_unk)) symbols.push_back(unk_id_);
      last_was_unk = true;
    }
    // Without an unknown token the character is dropped, as `tokenizers` does.
  }
}

void BpeModel::MergeAll(std::vector<int>& symbols) const {
  const int n = static_cast<int>(symbols.size());
  if (n < 2) return;
  // The symbols as a doubly linked list over their start positions; a merged-away symbol has
  // id -1. A candidate is (rank, position of its left symbol); stale candidates (whose pair
  // changed since they were pushed) are skipped when popped.
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  using Candidate = std::pair<int, int>;  // (rank, left position): smallest first
  std::vector<Candidate> storage;
  storage.reserve(n);
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap(
      std::greater<Candidate>(), std::move(storage));
  auto push = [&](int left) {
    if (left < 0 || next[left] < 0) return;
    auto it = merges_.find(PairKey(symbols[left], symbols[next[left]]));
    if (it != merges_.end()) heap.emplace(it->second.rank, left);
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const auto [rank, left] = heap.top();
    heap.pop();
    const int right = symbols[left] < 0 ? -1 : next[left];
    if (right < 0) continue;
    auto it = merges_.find(PairKey(symbols[left], symbols[right]));
    if (it == merges_.end() || it->second.rank != rank) continue;  // stale
    symbols[left] = it->second.result;
    symbols[right] = -1;
    next[left] = next[right];
    if (next[right] >= 0) prev[next[right]] = left;
    push(prev[left]);
    push(left);
  }
  int out = 0;
  for (int i = 0; i < n; ++i) {
    if (symbols[i] >= 0) symbols[out++] = symbols[i];
  }
  symbols.resize(out);
}

void BpeModel::Tokenize(std::string_view word, std::vector<int>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const int id = TokenToId(word); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<int> symbols;
  symbols.reserve(word.size());
  InitialSymbols(word, symbols);
  MergeAll(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
}

}  // namespace mnemo::tokenizer
