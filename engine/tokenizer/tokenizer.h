// Tokenizer: the interface between text and a model's token ids (docs/design.md §11).
//
// The engine, the scheduler's tasks and the server see a model's vocabulary only through this
// interface; each model family makes its own (ModelFamily::MakeTokenizer, engine/model/family.h):
// the native family's is ByteTokenizer (byte_tokenizer.h); Hugging Face model folders get theirs
// from LoadHfTokenizer (hf_tokenizer.h): byte-level BPE, SentencePiece-style BPE, or
// libsentencepiece.
//
// Ids are in [0, vocab_size()). A token stands for a byte string (TokenBytes), possibly part of
// a UTF-8 character (byte-level BPE, byte fallback, the byte tokenizer), or for nothing at all
// (a special: BOS, EOS, PAD, control tokens). Streaming detokenisation feeds TokenBytes into a
// Utf8StreamDecoder (utf8.h), so a token that ends inside a character waits for the rest; and
// bits-per-byte counts the UTF-8 bytes of the text, which every tokenizer has.
//
// The leading-space rule: SentencePiece tokenizers encode a text's start with a "▁" (a space)
// that the text does not have, and their Decode drops it again. So TokenBytes of a text's first
// token may carry one space that Decode removes; leading_spaces_dropped() says how many, and
// DecodeStream (decode_stream.h) applies the rule, so a stream that starts a text equals Decode.
// Tokens that continue a text (generated after a prompt) keep all their bytes.
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
  // Starts every sequence (fed before the first text token): the id EncodeWithSpecials puts
  // before the text; -1 when the tokenizer adds none (GPT-2, Qwen2), and then nothing primes.
  int bos = -1;
  int eos = -1;  // ends generation (when the request stops at EOS): the first of eos_ids()
  int pad = -1;  // fills batches in training; never sampled (-1 when it would be an EOS or BOS)
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // A short name for ModelInfo and logs: "byte", "bpe" (byte-level BPE), "sentencepiece-bpe"
  // (tokenizer.json with Metaspace), "sentencepiece" (libsentencepiece).
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

  // Every id that ends generation (generation_config.json may list several, e.g. Llama 3's
  // <|end_of_text|> and <|eot_id|>); the first is special_ids().eos. Empty when there is none.
  virtual std::vector<int> eos_ids() const {
    const int eos = special_ids().eos;
    return eos >= 0 ? std::vector<int>{eos} : std::vector<int>{};
  }

  // The ids of `text` (any bytes; the caller validates UTF-8 where it must), without BOS/EOS.
  virtual std::vector<int> Encode(std::string_view text) const = 0;
  // Encode(text) with the specials the tokenizer adds around one text ("add_special_tokens"):
  // by default BOS (when >= 0) then the text; Hugging Face tokenizers follow their
  // post_processor (which may also append, e.g. an EOS).
  virtual std::vector<int> EncodeWithSpecials(std::string_view text) const {
    std::vector<int> ids;
    if (bos_id() >= 0) ids.push_back(bos_id());
    std::vector<int> text_ids = Encode(text);
    ids.insert(ids.end(), text_ids.begin(), text_ids.end());
    return ids;
  }
  // The bytes `ids` stand for, concatenated; specials and out-of-range ids give nothing. `ids`
  // are taken to start a text: up to leading_spaces_dropped() leading ' ' bytes are dropped.
  virtual std::string Decode(absl::Span<const int> ids) const = 0;
  // The raw bytes one token stands for: "" for a special or out-of-range id. May be part of a
  // UTF-8 character (see the header comment).
  virtual std::string TokenBytes(int id) const = 0;
  // How many ' ' bytes Decode drops from the start of a text (the leading-space rule above): 1
  // for SentencePiece tokenizers, 0 for byte-level ones.
  virtual int leading_spaces_dropped() const { return 0; }
};

}  // namespace mnemo::tokenizer

#endif  // MNEMO_ENGINE_TOKENIZER_TOKENIZER_H_
