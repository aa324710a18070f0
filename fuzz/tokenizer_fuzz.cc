// tokenizer_fuzz: a Hugging Face model folder's tokenizer files through LoadHfTokenizer
// (engine/tokenizer/hf_tokenizer_loader.cc, which parses tokenizer.json with
// hf_tokenizer_json.cc); a tokenizer that loads then encodes and decodes a short text.
//
// Input: tokenizer.json's text, optionally followed by a NUL byte and tokenizer_config.json's
// text, and by another NUL and generation_config.json's (JSON text never holds a raw NUL).
// The files are written to a scratch folder, which is then loaded as a model folder is.
//
// Checks (tokenizer.h's contract):
//   - a load error is INVALID_ARGUMENT or UNIMPLEMENTED;
//   - the special ids and eos_ids() are -1 or inside the vocabulary;
//   - Encode and EncodeWithSpecials give ids in [0, vocab_size()), the latter containing the
//     former; Decode and TokenBytes give nothing for ids outside the vocabulary;
//   - DecodeStream over the ids, starting a text, equals SanitizeUtf8(Decode(ids))
//     (decode_stream.h).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/tokenizer/decode_stream.h"
#include "engine/tokenizer/hf_tokenizer_loader.h"
#include "engine/tokenizer/utf8.h"
#include "fuzz/fuzz_support.h"

namespace mnemo::fuzz {
namespace {

// Texts every loaded tokenizer encodes: ASCII with digits and spaces, accents (NFC vs NFD),
// CJK, an emoji, an ill-formed byte, a special-looking marker; plus the input's last bytes.
constexpr std::string_view kTexts[] = {
    "Hello world! 12345  x",
    "caf\xc3\xa9 cafe\xcc\x81 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x99\x82",
    " leading space\n\ttab <|endoftext|></s><s>",
    "bad \xff byte",
};

void WriteFolder(std::string_view input) {
  const std::string& dir = ScratchDir();
  const char* files[] = {"tokenizer.json", "tokenizer_config.json", "generation_config.json"};
  for (const char* file : files) {
    const std::string path = absl::StrCat(dir, "/", file);
    const size_t end = std::min(input.find('\0'), input.size());
    if (input.empty() && file != files[0]) {
      std::remove(path.c_str());
      continue;
    }
    WriteFile(path, input.substr(0, end));
    input.remove_prefix(std::min(end + 1, input.size()));
  }
}

void CheckIds(const tokenizer::Tokenizer& t, const std::vector<int>& ids, absl::string_view what) {
  for (int id : ids) {
    FUZZ_CHECK(id >= 0 && id < t.vocab_size(),
               absl::StrCat(what, " gave id ", id, " outside [0, ", t.vocab_size(), ")"));
  }
}

void CheckText(const tokenizer::Tokenizer& t, std::string_view text) {
  const std::vector<int> ids = t.Encode(text);
  CheckIds(t, ids, "Encode");
  const std::vector<int> with_specials = t.EncodeWithSpecials(text);
  CheckIds(t, with_specials, "EncodeWithSpecials");
  FUZZ_CHECK(ids.empty() || std::search(with_specials.begin(), with_specials.end(), ids.begin(),
                                        ids.end()) != with_specials.end(),
             absl::StrCat("EncodeWithSpecials gave [", absl::StrJoin(with_specials, ", "),
                          "], which does not contain Encode's [", absl::StrJoin(ids, ", "), "]"));

  const std::string decoded = t.Decode(ids);
  tokenizer::DecodeStream stream(t, /*starts_text=*/true);
  std::string streamed;
  for (int id : ids) streamed += stream.Feed(id);
  streamed += stream.Flush();
  FUZZ_CHECK(streamed == tokenizer::SanitizeUtf8(decoded),
             absl::StrCat("DecodeStream of [", absl::StrJoin(ids, ", "), "] gave \"", streamed,
                          "\" but Decode \"", decoded, "\""));
}

void CheckTokenizer(const tokenizer::Tokenizer& t, std::string_view input) {
  FUZZ_CHECK(t.vocab_size() > 0, "an empty vocabulary loaded");
  const tokenizer::SpecialIds specials = t.special_ids();
  for (int id : {specials.bos, specials.eos, specials.pad}) {
    FUZZ_CHECK(id >= -1 && id < t.vocab_size(), absl::StrCat("special id ", id));
  }
  CheckIds(t, t.eos_ids(), "eos_ids()");
  for (int id : {-1, t.vocab_size(), t.vocab_size() + 7}) {
    FUZZ_CHECK(t.TokenBytes(id).empty() && t.Decode({id}).empty() && !t.IsSpecial(id),
               absl::StrCat("id ", id, " outside the vocabulary stands for something"));
  }
  for (std::string_view text : kTexts) CheckText(t, text);
  CheckText(t, input.substr(input.size() - std::min<size_t>(input.size(), 48)));
}

}  // namespace
}  // namespace mnemo::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mnemo::fuzz;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  WriteFolder(input);
  absl::StatusOr<std::shared_ptr<const mnemo::tokenizer::Tokenizer>> loaded =
      mnemo::tokenizer::LoadHfTokenizer(ScratchDir());
  Note(absl::StrCat("LoadHfTokenizer: ", loaded.status().ToString()));
  if (!loaded.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(loaded.status()) || absl::IsUnimplemented(loaded.status()),
               loaded.status().ToString());
    return 0;
  }
  CheckTokenizer(**loaded, input);
  return 0;
}
