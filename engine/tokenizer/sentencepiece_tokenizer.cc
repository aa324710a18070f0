#include "engine/tokenizer/sentencepiece_tokenizer.h"

#include "engine/tokenizer/hf_tokenizer_loader.h"

// sentencepiece_processor.h declares its own `namespace absl { using std::string_view; }`,
// which is ambiguous next to the real Abseil; renaming it while the header is read keeps the
// two apart (the library's symbols take std::string_view either way).
#define absl mnemo_sentencepiece_absl
#include <sentencepiece_processor.h>
#undef absl

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "engine/tokenizer/utf8.h"

namespace mnemo::tokenizer {

struct SentencePieceTokenizer::Impl {
  sentencepiece::SentencePieceProcessor processor;
};

namespace {

constexpr char kSpaceSymbol[] = "\xE2\x96\x81";  // "▁"

int ByteOfPiece(const std::string& piece) {  // "<0xNN>" -> NN
  if (piece.size() != 6) return -1;
  return static_cast<int>(std::strtol(piece.substr(3, 2).c_str(), nullptr, 16));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::Create(
    const std::string& path, const SentencePieceOptions& options) {
  auto impl = std::make_unique<Impl>();
  const sentencepiece::util::Status loaded = impl->processor.Load(path);
  if (!loaded.ok()) {
    const std::string message =
        absl::StrCat(path, ": sentencepiece cannot load it: ", loaded.ToString());
    if (loaded.code() == sentencepiece::util::StatusCode::kNotFound)
      return absl::NotFoundError(message);
    return absl::InvalidArgumentError(message);
  }
  std::unique_ptr<SentencePieceTokenizer> tokenizer(new SentencePieceTokenizer(std::move(impl)));
  const sentencepiece::SentencePieceProcessor& sp = tokenizer->impl_->processor;
  tokenizer->vocab_size_ = sp.GetPieceSize();
  tokenizer->is_special_.assign(tokenizer->vocab_size_, 0);
  tokenizer->token_bytes_.resize(tokenizer->vocab_size_);
  int probe = -1;  // a piece "▁x...", to see whether decoding drops its space
  for (int id = 0; id < tokenizer->vocab_size_; ++id) {
    const std::string& piece = sp.IdToPiece(id);
    if (sp.IsControl(id) || sp.IsUnknown(id)) {
      tokenizer->is_special_[id] = 1;
    } else if (sp.IsByte(id)) {
      tokenizer->token_bytes_[id] = std::string(1, static_cast<char>(ByteOfPiece(piece)));
    } else {
      tokenizer->token_bytes_[id] = absl::StrReplaceAll(piece, {{kSpaceSymbol, " "}});
      if (probe < 0 && piece.size() > 3 && piece.compare(0, 3, kSpaceSymbol) == 0 &&
          piece.compare(3, 3, kSpaceSymbol) != 0) {
        probe = id;
      }
    }
  }
  if (probe >= 0) {
    const std::string decoded = sp.DecodeIds({probe});
    tokenizer->leading_spaces_dropped_ = decoded.empty() || decoded[0] != ' ' ? 1 : 0;
  }
  tokenizer->special_ids_.bos = options.add_bos ? sp.bos_id() : -1;
  tokenizer->eos_ids_ = options.eos_ids;
  if (tokenizer->eos_ids_.empty() && sp.eos_id() >= 0) tokenizer->eos_ids_.push_back(sp.eos_id());
  tokenizer->special_ids_.eos = tokenizer->eos_ids_.empty() ? -1 : tokenizer->eos_ids_.front();
  if (options.add_eos && sp.eos_id() >= 0) tokenizer->suffix_ids_.push_back(sp.eos_id());
  int pad = options.pad_id == -2 ? sp.pad_id() : options.pad_id;
  const std::vector<int>& eos = tokenizer->eos_ids_;
  if (pad == tokenizer->special_ids_.bos || std::find(eos.begin(), eos.end(), pad) != eos.end()) {
    pad = -1;  // the engine never samples pad: it must not be a token generation needs
  }
  tokenizer->special_ids_.pad = pad;
  return tokenizer;
}

SentencePieceTokenizer::SentencePieceTokenizer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

bool SentencePieceTokenizer::IsSpecial(int id) const {
  return id >= 0 && id < vocab_size_ && is_special_[id];
}

int SentencePieceTokenizer::PieceToId(std::string_view piece) const {
  const sentencepiece::SentencePieceProcessor& sp = impl_->processor;
  const int id = sp.PieceToId(piece);
  if (id < 0 || (id == sp.unk_id() && sp.IdToPiece(id) != piece)) return -1;
  return id;
}

std::vector<int> SentencePieceTokenizer::Encode(std::string_view text) const {
  if (!IsValidUtf8(text)) return impl_->processor.EncodeAsIds(SanitizeUtf8(text));
  return impl_->processor.EncodeAsIds(text);
}

std::vector<int> SentencePieceTokenizer::EncodeWithSpecials(std::string_view text) const {
  std::vector<int> ids;
  if (special_ids_.bos >= 0) ids.push_back(special_ids_.bos);
  std::vector<int> text_ids = Encode(text);
  ids.insert(ids.end(), text_ids.begin(), text_ids.end());
  ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

std::string SentencePieceTokenizer::TokenBytes(int id) const {
  return id >= 0 && id < vocab_size_ ? token_bytes_[id] : std::string();
}

std::string SentencePieceTokenizer::Decode(absl::Span<const int> ids) const {
  std::string bytes;
  for (int id : ids) bytes += TokenBytes(id);
  size_t drop = 0;
  while (drop < bytes.size() && static_cast<int>(drop) < leading_spaces_dropped_ &&
         bytes[drop] == ' ') {
    ++drop;
  }
  return bytes.substr(drop);
}

absl::StatusOr<std::shared_ptr<const Tokenizer>> LoadSentencePieceTokenizer(
    const std::string& path, const SentencePieceOptions& options) {
  absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> tokenizer =
      SentencePieceTokenizer::Create(path, options);
  if (!tokenizer.ok()) return tokenizer.status();
  return std::shared_ptr<const Tokenizer>(*std::move(tokenizer));
}

void InstallSentencePieceLoader() { SetSentencePieceLoader(&LoadSentencePieceTokenizer); }

}  // namespace mnemo::tokenizer
