// HfTokenizer: the tokenizer of a Hugging Face tokenizer.json with a BPE model, byte-level
// (GPT-2, Qwen2, Llama 3: name "bpe") or SentencePiece-style (Llama 2, Mistral: Metaspace,
// byte fallback; name "sentencepiece-bpe"), encoding and decoding as the `tokenizers` library
// (and so transformers 5.x) does. LoadHfTokenizer (hf_tokenizer_loader.h) builds it from a
// model folder; this class only runs the pipeline:
//
//   text -> added tokens cut out (non-normalized ones) -> each piece between them normalized
//        -> normalized added tokens cut out -> pre-tokenized into words -> BPE per word.
//
// Text that is not valid UTF-8 is encoded as if each ill-formed part were U+FFFD (Python
// strings, which transformers takes, cannot hold it). Decode and TokenBytes skip special added
// tokens (transformers' skip_special_tokens=True); a non-special added token stands for its
// content. Encoding caches the ids of each distinct word within one call.
//
// Immutable after Create: every method may be called from any thread at once.
#ifndef MNEMO_ENGINE_TOKENIZER_HF_TOKENIZER_H_
#define MNEMO_ENGINE_TOKENIZER_HF_TOKENIZER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/tokenizer/added_tokens.h"
#include "engine/tokenizer/bpe.h"
#include "engine/tokenizer/normalizer.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/token_decoder.h"
#include "engine/tokenizer/tokenizer.h"

namespace mnemo::tokenizer {

// The parts of a tokenizer.json plus the special ids from the folder's config files.
struct HfTokenizerParts {
  std::string name;  // "bpe" or "sentencepiece-bpe"
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  BpeModel model;
  std::vector<AddedToken> added_tokens;
  TokenDecoder decoder;
  std::vector<int> prefix_ids;  // what "with special tokens" puts before the text
  std::vector<int> suffix_ids;  // and after it
  std::vector<int> eos_ids;     // every id that ends generation, the main one first
  int pad_id = -1;
};

class HfTokenizer : public Tokenizer {
 public:
  // INVALID_ARGUMENT when an added token or special id lies outside the vocabulary.
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> Create(HfTokenizerParts parts);

  std::string_view name() const override { return name_; }
  int vocab_size() const override { return vocab_size_; }
  SpecialIds special_ids() const override { return special_ids_; }
  std::vector<int> eos_ids() const override { return eos_ids_; }
  bool IsSpecial(int id) const override;

  std::vector<int> Encode(std::string_view text) const override;
  std::vector<int> EncodeWithSpecials(std::string_view text) const override;
  std::string Decode(absl::Span<const int> ids) const override;
  std::string TokenBytes(int id) const override;
  int leading_spaces_dropped() const override { return decoder_.leading_spaces_dropped(); }

  // The token string of `id` (vocabulary or added token), "" when there is none.
  const std::string& IdToToken(int id) const;

 private:
  explicit HfTokenizer(HfTokenizerParts parts);

  // Appends the ids of `piece`, text between non-normalized added tokens.
  void EncodePiece(std::string piece, bool at_text_start, std::vector<int>& ids,
                   absl::flat_hash_map<std::string, std::vector<int>>& cache) const;

  std::string name_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  BpeModel model_;
  AddedTokenMatcher raw_added_;         // normalized=false: matched in the raw text
  AddedTokenMatcher normalized_added_;  // normalized=true: matched in normalized pieces
  TokenDecoder decoder_;
  std::vector<int> prefix_ids_;
  std::vector<int> suffix_ids_;
  std::vector<int> eos_ids_;
  SpecialIds special_ids_;
  int vocab_size_ = 0;
  std::vector<std::string> added_content_;  // by id; "" where the id is not an added token
  std::vector<char> is_added_;              // by id
  std::vector<char> is_special_;            // by id
  std::vector<std::string> token_bytes_;    // by id: TokenBytes, "" for specials
};

}  // namespace mnemo::tokenizer

#endif  // MNEMO_ENGINE_TOKENIZER_HF_TOKENIZER_H_
