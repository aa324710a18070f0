// Tokenizer: the interface between text and a model's token ids (docs/design.md §11).
//
// The engine, the scheduler's tasks and the server see a model's vocabulary only through this
// interface; each model family makes its own (ModelFamily::MakeTokenizer, engine/model/family.h):
// the native family's is ByteTokenizer (byte_tokenizer.h); BPE and SentencePiece tokenizers
// come with the Hugging Face families.
//
// Ids are in [0, vocab_size()). A token stands for a byte string (TokenBytes), possibly part of
// a UTF-8 character (byte-level BPE, byte fallback, the byte tokenizer), or for nothing at all
// (a special: BOS, EOS, PAD, control tokens). Streaming detokenisation feeds TokenBytes into a
// Utf8StreamDecoder (utf8.h), so a token that ends inside a character waits for the rest; and
// bits-per-byte counts the UTF-8 bytes of the text, which every tokenizer has.
//
// Thread-safety: implementations are immutable once made; every method is const and may be
// called from any thread at once (the server's Tokenize runs beside the loop thread's tasks).
#ifndef MNEMO_ENGINE_TOKENIZER_TOKENIZER_H_
#define MNEMO_ENGINE_TOKENIZER_TOKENIZER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"

namespace mnemo::tokenizer {

// The special ids a model's serving uses; -1 where the vocabulary has none.
struct SpecialIds {
  int bos = -1;  // starts every sequence (fed before the first text token)
  int eos = -1;  // ends generation (when the request stops at EOS)
  int pad = -1;  // fills batches in training; never sampled
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // A short name for ModelInfo and logs: "byte" (later "bpe", "sentencepiece").
  virtual std::string_view name() const = 0;
  // Ids are in [0, vocab_size()).
  virtual int vocab_size() const = 0;
  virtual SpecialIds special_ids() const = 0;
  int bos_id() const { return special_ids().bos; }
  int eos_id() const { return special_ids().eos; }
  int pad_id() const { return special_ids().pad; }
  // True for a special token (one that stands for no text); false for text tokens and for
  // ids outside the vocabulary.
  virtual bool IsSpecial(int id) const = 0;

  // The ids of `text` (any bytes; the caller validates UTF-8 where it must), without BOS/EOS.
  virtual std::vector<int> Encode(std::string_view text) const = 0;
  // The bytes `ids` stand for, concatenated; specials and out-of-range ids give nothing.
  virtual std::string Decode(absl::Span<const int> ids) const = 0;
  // The raw bytes one token stands for: "" for a special or out-of-range id. May be part of a
  // UTF-8 character (see the header comment).
  virtual std::string TokenBytes(int id) const = 0;
};

}  // namespace mnemo::tokenizer

#endif  // MNEMO_ENGINE_TOKENIZER_TOKENIZER_H_
