// SentencePieceTokenizer: a model folder's tokenizer.model run by libsentencepiece itself (the
// path LoadHfTokenizer takes when there is no tokenizer.json). Ids are the library's own
// (EncodeAsIds); name "sentencepiece".
//
// TokenBytes: a piece's text with "▁" -> " ", a byte piece (<0xNN>) its byte, "" for control
// pieces and the unknown piece (both count as special, like the tokenizer.json path's <unk>).
// When the model adds a dummy prefix, leading_spaces_dropped() is 1: Decode drops the space
// the encoder put before the text, as the library's DecodeIds does.
//
// Owns the processor. Immutable after Create: every method may be called from any thread at
// once (libsentencepiece's encode and decode are const).
#ifndef MNEMO_ENGINE_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_
#define MNEMO_ENGINE_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/tokenizer/tokenizer.h"

namespace mnemo::tokenizer {

struct SentencePieceOptions {
  bool add_bos = true;       // EncodeWithSpecials starts with the model's BOS (Llama's default)
  bool add_eos = false;      // and ends with its EOS
  std::vector<int> eos_ids;  // from the folder's config files; empty: the model's EOS
  int pad_id = -2;           // -2: the model's own pad id
};

class SentencePieceTokenizer : public Tokenizer {
 public:
  // NOT_FOUND / INVALID_ARGUMENT naming `path` when the library cannot load it.
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> Create(
      const std::string& path, const SentencePieceOptions& options);
  ~SentencePieceTokenizer() override;

  std::string_view name() const override { return "sentencepiece"; }
  int vocab_size() const override { return vocab_size_; }
  SpecialIds special_ids() const override { return special_ids_; }
  std::vector<int> eos_ids() const override { return eos_ids_; }
  bool IsSpecial(int id) const override;

  std::vector<int> Encode(std::string_view text) const override;
  std::vector<int> EncodeWithSpecials(std::string_view text) const override;
  std::string Decode(absl::Span<const int> ids) const override;
  std::string TokenBytes(int id) const override;
  int leading_spaces_dropped() const override { return leading_spaces_dropped_; }

  // The id of `piece` in the model, or -1 (for the loader's lookups of named specials).
  int PieceToId(std::string_view piece) const;

 private:
  struct Impl;  // keeps sentencepiece_processor.h (which clashes with Abseil) out of headers
  explicit SentencePieceTokenizer(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
  int vocab_size_ = 0;
  SpecialIds special_ids_;
  std::vector<int> eos_ids_;
  std::vector<int> suffix_ids_;
  std::vector<char> is_special_;          // by id
  std::vector<std::string> token_bytes_;  // by id
  int leading_spaces_dropped_ = 0;
};

// SetSentencePieceLoader's function (hf_tokenizer_loader.h): SentencePieceTokenizer::Create.
absl::StatusOr<std::shared_ptr<const Tokenizer>> LoadSentencePieceTokenizer(
    const std::string& path, const SentencePieceOptions& options);
// Lets LoadHfTokenizer read tokenizer.model files in this program (one without libprotobuf).
void InstallSentencePieceLoader();

}  // namespace mnemo::tokenizer

#endif  // MNEMO_ENGINE_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_
