// AddedTokens: the `added_tokens` of a tokenizer.json (specials such as <|endoftext|> and
// control tokens), which are cut out of the text before the model sees it.
//
// Matching follows the `tokenizers` library: leftmost match first, the longest among those
// starting there; a single_word token matches only when no word character (letter, digit,
// mark, '_') touches it on either side; lstrip / rstrip widen a match over the whitespace
// before / after it (the whitespace then belongs to the token). Tokens with normalized=false
// are matched in the raw text; those with normalized=true in each normalized piece between
// them, against their own normalized content (HfTokenizer does the two passes).
//
// Immutable after construction: Split may be called from any thread at once.
#ifndef MNEMO_ENGINE_TOKENIZER_ADDED_TOKENS_H_
#define MNEMO_ENGINE_TOKENIZER_ADDED_TOKENS_H_

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace mnemo::tokenizer {

struct AddedToken {
  int id = -1;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

// One piece of a split text: bytes [begin, end), and the added token's id, or -1 for text the
// model tokenizes.
struct Segment {
  size_t begin;
  size_t end;
  int id;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `tokens`: the tokens to match, with `content` as it appears in the text searched.
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

  bool empty() const { return tokens_.empty(); }
  // `text` cut into segments that cover it in order (no empty text segments).
  std::vector<Segment> Split(std::string_view text) const;

 private:
  // The longest token that matches `text` at `at`, or -1 (an index into tokens_).
  int LongestAt(std::string_view text, size_t at) const;

  std::vector<AddedToken> tokens_;
  std::array<std::vector<int>, 256> by_first_byte_;  // indices into tokens_, longest first
};

}  // namespace mnemo::tokenizer

#endif  // MNEMO_ENGINE_TOKENIZER_ADDED_TOKENS_H_
