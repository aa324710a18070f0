// ParseTokenizerJson: a Hugging Face tokenizer.json (the `tokenizers` library's serialisation)
// read into HfTokenizerParts: the BPE model, normalizer, pre-tokenizer, decoder, added tokens
// and post-processor (what "with special tokens" adds). The eos / pad ids come from the
// folder's other files (hf_tokenizer_loader.h) and are left empty here.
//
// Supported: model BPE; normalizers Prepend, Replace, NFC/NFD/NFKC/NFKD, Sequence; the
// pre-tokenizers and decoders of pre_tokenizer.h and token_decoder.h; post-processors
// TemplateProcessing, ByteLevel, BertProcessing, RobertaProcessing, Sequence. Anything else is
// UNIMPLEMENTED naming the field, the type and what is supported.
//
// A pure function; thread-safe.
#ifndef MNEMO_ENGINE_TOKENIZER_HF_TOKENIZER_JSON_H_
#define MNEMO_ENGINE_TOKENIZER_HF_TOKENIZER_JSON_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/tokenizer/hf_tokenizer.h"

namespace mnemo::tokenizer {

// `path` names the file in errors: "PATH: FIELD: problem". INVALID_ARGUMENT for bad JSON or
// a missing / mistyped field; UNIMPLEMENTED for an unsupported component type.
absl::StatusOr<HfTokenizerParts> ParseTokenizerJson(std::string_view json_text,
                                                    const std::string& path);

}  // namespace mnemo::tokenizer

#endif  // MNEMO_ENGINE_TOKENIZER_HF_TOKENIZER_JSON_H_
