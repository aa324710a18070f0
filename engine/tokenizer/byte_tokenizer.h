// ByteTokenizer: the native models' byte-level vocabulary. Ids 0..255 are the bytes of the
// text; BOS, EOS and PAD (engine/model/model_config.h) are specials that carry no bytes.
//
// Stateless and immutable: thread-safe, cheap to construct.
#ifndef MNEMO_ENGINE_TOKENIZER_BYTE_TOKENIZER_H_
#define MNEMO_ENGINE_TOKENIZER_BYTE_TOKENIZER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"
#include "engine/model/model_config.h"

namespace mnemo::tokenizer {

class ByteTokenizer {
 public:
  static constexpr int kBosId = model::kBosId;
  static constexpr int kEosId = model::kEosId;
  static constexpr int kPadId = model::kPadId;
  static constexpr int kVocabSize = model::kByteVocabSize;

  // One id per byte of `text` (no BOS/EOS added). Any bytes are accepted.
  std::vector<int> Encode(std::string_view text) const;
  // The raw bytes of `ids`; specials and out-of-range ids contribute nothing.
  std::string Decode(absl::Span<const int> ids) const;
  // The raw bytes of one token: one byte, or "" for a special or out-of-range id.
  std::string TokenBytes(int id) const;

  bool IsByte(int id) const { return id >= 0 && id < 256; }
  bool IsSpecial(int id) const { return id >= 256 && id < kVocabSize; }
  // "<bos>", "<eos>", "<pad>" for specials, "" otherwise (for logs and debugging UIs).
  std::string_view SpecialName(int id) const;
  int vocab_size() const { return kVocabSize; }
  const char* name() const { return "byte"; }
};

}  // namespace mnemo::tokenizer

#endif  // MNEMO_ENGINE_TOKENIZER_BYTE_TOKENIZER_H_
