// The byte-level alphabet of GPT-2-style BPE: every byte 0..255 is written as one printable
// Unicode character, so a vocabulary of strings can hold arbitrary bytes. Printable Latin-1
// bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) stand for themselves; the others (controls,
// space, DEL, NBSP, soft hyphen) take U+0100.. in byte order, so ' ' is "Ġ" and '\n' is "Ċ".
//
// Stateless functions over constant tables: thread-safe.
#ifndef MNEMO_ENGINE_TOKENIZER_BYTE_LEVEL_H_
#define MNEMO_ENGINE_TOKENIZER_BYTE_LEVEL_H_

#include <optional>
#include <string>
#include <string_view>

namespace mnemo::tokenizer {

// Appends the byte-level form of `bytes` (one character per byte, UTF-8 encoded) to `out`.
void AppendByteLevel(std::string_view bytes, std::string& out);

// The bytes a byte-level string stands for; nullopt when it holds a character outside the
// alphabet (an added token's text, say), which the caller then keeps as it is.
std::optional<std::string> FromByteLevel(std::string_view text);

}  // namespace mnemo::tokenizer

#endif  // MNEMO_ENGINE_TOKENIZER_BYTE_LEVEL_H_
