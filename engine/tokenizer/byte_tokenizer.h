// ByteTokenizer: the native models' byte-level vocabulary (the native family's Tokenizer). Ids
// 0..255 are the bytes of the text; BOS, EOS and PAD are specials that carry no bytes. The ids
// are defined here and re-exported as model::kBosId etc. (engine/model/model_config.h) for the
// native trainer, evaluator and tools, which work on bytes directly.
//
// Stateless and immutable: thread-safe, cheap to construct.
#ifndef MNEMO_ENGINE_TOKENIZER_BYTE_TOKENIZER_H_
#define MNEMO_ENGINE_TOKENIZER_BYTE_TOKENIZER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"
#include "engine/tokenizer/tokenizer.h"

namespace mnemo::tokenizer {

class ByteTokenizer : public Tokenizer {
 public:
  static constexpr int kBosId = 256;
  static constexpr int kEosId = 257;
  static constexpr int kPadId = 258;
  static constexpr int kVocabSize = 259;

  std::string_view name() const override { return "byte"; }
  int vocab_size() const override { return kVocabSize; }
  SpecialIds special_ids() const override { return {kBosId, kEosId, kPadId}; }
  bool IsSpecial(int id) const override { return id >= 256 && id < kVocabSize; }

  // One id per byte of `text` (no BOS/EOS added). Any bytes are accepted.
  std::vector<int> Encode(std::string_view text) const override;
  // The raw bytes of `ids`; specials and out-of-range ids contribute nothing.
  std::string Decode(absl::Span<const int> ids) const override;
  // The raw bytes of one token: one byte, or "" for a special or out-of-range id.
  std::string TokenBytes(int id) const override;

  bool IsByte(int id) const { return id >= 0 && id < 256; }
  // "<bos>", "<eos>", "<pad>" for specials, "" otherwise (for logs and debugging UIs).
  std::string_view SpecialName(int id) const;
};

}  // namespace mnemo::tokenizer

#endif  // MNEMO_ENGINE_TOKENIZER_BYTE_TOKENIZER_H_
