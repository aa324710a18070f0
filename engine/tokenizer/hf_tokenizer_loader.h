// LoadHfTokenizer: the one way to get the tokenizer of a Hugging Face model folder.
//
//   - tokenizer.json present: HfTokenizer (hf_tokenizer.h), byte-level BPE ("bpe") or
//     SentencePiece-style BPE ("sentencepiece-bpe"), as transformers 5.x encodes and decodes;
//   - else tokenizer.model: SentencePieceTokenizer (libsentencepiece, "sentencepiece"), in
//     programs that installed it with SetSentencePieceLoader (UNIMPLEMENTED elsewhere, naming
//     the fix). libsentencepiece bundles its own copy of protobuf, whose symbols collide with
//     the libprotobuf gRPC and LibTorch load (the process crashes at start-up), so that path is
//     the separate library mnemo_tokenizer_sentencepiece, linked only where no libprotobuf is.
//
// The special ids the engine uses (tokenizer.h's SpecialIds):
//   - bos: the id "with special tokens" puts first (tokenizer.json's post_processor, or
//     tokenizer_config.json's add_bos_token / add_eos_token when it sets them explicitly, as
//     transformers' Llama tokenizers do); -1 when nothing is prepended (GPT-2, Qwen2);
//   - eos_ids(): generation_config.json's eos_token_id (an int or a list), else config.json's,
//     else tokenizer_config.json's eos_token; eos is the first of them;
//   - pad: tokenizer_config.json's pad_token, else generation_config.json's pad_token_id; -1
//     when it is one of the eos ids or the bos (Qwen2 pads with its EOS, and the engine never
//     samples pad).
//
// Errors, one line naming the file and field: NOT_FOUND when the folder has neither file;
// INVALID_ARGUMENT for bad JSON or a missing / mistyped field; UNIMPLEMENTED for a model,
// normalizer, pre-tokenizer, decoder or post-processor type mnemo does not support (the
// message lists what is supported). Thread-safe (reads files; no shared state).
#ifndef MNEMO_ENGINE_TOKENIZER_HF_TOKENIZER_LOADER_H_
#define MNEMO_ENGINE_TOKENIZER_HF_TOKENIZER_LOADER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"

namespace mnemo::tokenizer {

absl::StatusOr<std::shared_ptr<const Tokenizer>> LoadHfTokenizer(const std::string& dir);

// Options of the tokenizer.model path (sentencepiece_tokenizer.h).
struct SentencePieceOptions;
// Makes the tokenizer of a tokenizer.model file (sentencepiece_tokenizer.h's
// LoadSentencePieceTokenizer). Installed once, before LoadHfTokenizer runs.
using SentencePieceLoader = absl::StatusOr<std::shared_ptr<const Tokenizer>> (*)(
    const std::string& path, const SentencePieceOptions& options);
void SetSentencePieceLoader(SentencePieceLoader loader);

}  // namespace mnemo::tokenizer

#endif  // MNEMO_ENGINE_TOKENIZER_HF_TOKENIZER_LOADER_H_
