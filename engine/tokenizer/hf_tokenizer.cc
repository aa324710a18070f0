#include "engine/tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/utf8.h"

namespace mnemo::tokenizer {
namespace {

const std::string& EmptyString() {
  static const std::string* const empty = new std::string();
  return *empty;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Create(HfTokenizerParts parts) {
  int vocab_size = parts.model.size();
  for (const AddedToken& token : parts.added_tokens) {
    if (token.id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("added token \"", token.content, "\" has id ", token.id));
    }
    if (token.content.empty()) return absl::InvalidArgumentError("an added token has no content");
    vocab_size = std::max(vocab_size, token.id + 1);
  }
  for (const std::vector<int>* ids : {&parts.prefix_ids, &parts.suffix_ids, &parts.eos_ids}) {
    for (int id : *ids) {
      if (id < 0 || id >= vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("special id ", id, " is outside the vocabulary (size ", vocab_size, ")"));
      }
    }
  }
  if (parts.pad_id >= vocab_size) parts.pad_id = -1;
  return std::unique_ptr<HfTokenizer>(new HfTokenizer(std::move(parts)));
}

HfTokenizer::HfTokenizer(HfTokenizerParts parts)
    : name_(std::move(parts.name)),
      normalizer_(std::move(parts.normalizer)),
      pre_tokenizer_(std::move(parts.pre_tokenizer)),
      model_(std::move(parts.model)),
      decoder_(std::move(parts.decoder)),
      prefix_ids_(std::move(parts.prefix_ids)),
      suffix_ids_(std::move(parts.suffix_ids)),
      eos_ids_(std::move(parts.eos_ids)) {
  vocab_size_ = model_.size();
  for (const AddedToken& token : parts.added_tokens)
    vocab_size_ = std::max(vocab_size_, token.id + 1);
  added_content_.assign(vocab_size_, std::string());
  is_added_.assign(vocab_size_, 0);
  is_special_.assign(vocab_size_, 0);
  std::vector<AddedToken> raw, normalized;
  for (AddedToken& token : parts.added_tokens) {
    added_content_[token.id] = token.content;
    is_added_[token.id] = 1;
    is_special_[token.id] = token.special ? 1 : 0;
    if (token.normalized) {
      // Matched in normalized text, so against its own normalized form.
      normalizer_.Apply(token.content);
      normalized.push_back(std::move(token));
    } else {
      raw.push_back(std::move(token));
    }
  }
  raw_added_ = AddedTokenMatcher(std::move(raw));
  normalized_added_ = AddedTokenMatcher(std::move(normalized));
  token_bytes_.resize(vocab_size_);
  for (int id = 0; id < vocab_size_; ++id) {
    if (is_special_[id]) continue;
    token_bytes_[id] =
        is_added_[id] ? added_content_[id] : decoder_.TokenBytes(model_.IdToToken(id));
  }
  special_ids_.bos = prefix_ids_.empty() ? -1 : prefix_ids_.front();
  special_ids_.eos = eos_ids_.empty() ? -1 : eos_ids_.front();
  special_ids_.pad = parts.pad_id;
}

bool HfTokenizer::IsSpecial(int id) const { return id >= 0 && id < vocab_size_ && is_special_[id]; }

const std::string& HfTokenizer::IdToToken(int id) const {
  if (id < 0 || id >= vocab_size_) return EmptyString();
  return is_added_[id] ? added_content_[id] : model_.IdToToken(id);
}

void HfTokenizer::EncodePiece(std::string piece, bool at_text_start, std::vector<int>& ids,
                              absl::flat_hash_map<std::string, std::vector<int>>& cache) const {
  normalizer_.Apply(piece);
  std::vector<PreToken> words;
  if (normalized_added_.empty()) {
    pre_tokenizer_.Run({std::move(piece), at_text_start}, words);
  } else {
    for (const Segment& s : normalized_added_.Split(piece)) {
      if (s.id >= 0) {
        // Flush the words so far: the added token comes after them.
        for (const PreToken& w : words) {
          auto [it, inserted] = cache.try_emplace(w.text);
          if (inserted) model_.Tokenize(w.text, it->second);
          ids.insert(ids.end(), it->second.begin(), it->second.end());
        }
        words.clear();
        ids.push_back(s.id);
        continue;
      }
      pre_tokenizer_.Run({piece.substr(s.begin, s.end - s.begin), at_text_start && s.begin == 0},
                         words);
    }
  }
  for (const PreToken& w : words) {
    auto [it, inserted] = cache.try_emplace(w.text);
    if (inserted) model_.Tokenize(w.text, it->second);
    ids.insert(ids.end(), it->second.begin(), it->second.end());
  }
}

std::vector<int> HfTokenizer::Encode(std::string_view text) const {
  std::string sanitized;
  if (!IsValidUtf8(text)) {
    sanitized = SanitizeUtf8(text);
    text = sanitized;
  }
  std::vector<int> ids;
  ids.reserve(text.size() / 3 + 4);
  absl::flat_hash_map<std::string, std::vector<int>> cache;  // word -> its ids, this call only
  if (raw_added_.empty()) {
    if (!text.empty()) EncodePiece(std::string(text), /*at_text_start=*/true, ids, cache);
    return ids;
  }
  for (const Segment& s : raw_added_.Split(text)) {
    if (s.id >= 0) {
      ids.push_back(s.id);
    } else {
      EncodePiece(std::string(text.substr(s.begin, s.end - s.begin)), s.begin == 0, ids, cache);
    }
  }
  return ids;
}

std::vector<int> HfTokenizer::EncodeWithSpecials(std::string_view text) const {
  std::vector<int> ids = prefix_ids_;
  std::vector<int> text_ids = Encode(text);
  ids.insert(ids.end(), text_ids.begin(), text_ids.end());
  ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

std::string HfTokenizer::TokenBytes(int id) const {
  return id >= 0 && id < vocab_size_ ? token_bytes_[id] : std::string();
}

std::string HfTokenizer::Decode(absl::Span<const int> ids) const {
  std::string bytes;
  for (int id : ids) {
    if (id >= 0 && id < vocab_size_) bytes += token_bytes_[id];
  }
  size_t drop = 0;
  while (drop < bytes.size() && static_cast<int>(drop) < leading_spaces_dropped() &&
         bytes[drop] == ' ') {
    ++drop;
  }
  bytes.erase(0, drop);
  return bytes;
}

}  // namespace mnemo::tokenizer
