#include "engine/tokenizer/hf_tokenizer_json.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "engine/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace mnemo::tokenizer {
namespace {

using Json = nlohmann::json;

// Token ids (vocabulary and added tokens) must lie in [0, this). The largest real vocabularies
// have ~256K entries; the tokenizer keeps tables indexed by id, which an id of 2^31 - 1 would
// make tens of gigabytes (and whose size, id + 1, would overflow an int).
constexpr int64_t kMaxTokenIds = int64_t{1} << 21;
// Leading spaces a Strip decoder may drop: real files strip 1.
constexpr uint64_t kMaxStrip = 64;

// Builds "PATH: FIELD: problem" errors for one file.
class Where {
 public:
  explicit Where(const std::string& path) : path_(path) {}
  absl::Status Invalid(absl::string_view field, absl::string_view problem) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", field, ": ", problem));
  }
  absl::Status Unsupported(absl::string_view field, absl::string_view type,
                           absl::string_view supported) const {
    return absl::UnimplementedError(absl::StrCat(
        path_, ": ", field, ": type \"", type, "\" is not supported (supported: ", supported, ")"));
  }

 private:
  const std::string& path_;
};

// The member `key` of `object`, or null when absent.
const Json& Member(const Json& object, const char* key) {
  static const Json* const null = new Json();
  if (!object.is_object()) return *null;
  auto it = object.find(key);
  return it == object.end() ? *null : *it;
}

absl::StatusOr<bool> GetBool(const Json& object, const char* key, bool fallback, const Where& where,
                             const std::string& field) {
  const Json& value = Member(object, key);
  if (value.is_null()) return fallback;
  if (!value.is_boolean()) return where.Invalid(absl::StrCat(field, ".", key), "not a boolean");
  return value.get<bool>();
}

absl::StatusOr<std::string> GetString(const Json& object, const char* key, const Where& where,
                                      const std::string& field) {
  const Json& value = Member(object, key);
  if (!value.is_string()) {
    return where.Invalid(absl::StrCat(field, ".", key),
                         value.is_null() ? "missing" : "not a string");
  }
  return value.get<std::string>();
}

absl::StatusOr<std::string> GetType(const Json& object, const Where& where,
                                    const std::string& field) {
  if (!object.is_object()) return where.Invalid(field, "not an object");
  return GetString(object, "type", where, field);
}

// A {"String": s} or {"Regex": r} pattern, compiled.
absl::StatusOr<std::shared_ptr<const Pcre2Regex>> GetPattern(const Json& object, const Where& where,
                                                             const std::string& field) {
  const Json& pattern = Member(object, "pattern");
  const std::string name = absl::StrCat(field, ".pattern");
  const bool literal = Member(pattern, "String").is_string();
  const Json& text = literal ? Member(pattern, "String") : Member(pattern, "Regex");
  if (!text.is_string()) return where.Invalid(name, "needs a \"String\" or \"Regex\" member");
  auto regex = Pcre2Regex::Create(text.get<std::string>(), literal);
  if (!regex.ok()) return where.Invalid(name, regex.status().message());
  return std::shared_ptr<const Pcre2Regex>(std::move(*regex));
}

absl::StatusOr<PrependScheme> GetPrependScheme(const Json& object, const Where& where,
                                               const std::string& field) {
  const Json& scheme = Member(object, "prepend_scheme");
  if (scheme.is_null()) {  // older files: add_prefix_space
    MNEMO_ASSIGN_OR_RETURN(bool add, GetBool(object, "add_prefix_space", true, where, field));
    return add ? PrependScheme::kAlways : PrependScheme::kNever;
  }
  const std::string value = scheme.is_string() ? scheme.get<std::string>() : "";
  if (value == "always") return PrependScheme::kAlways;
  if (value == "first") return PrependScheme::kFirst;
  if (value == "never") return PrependScheme::kNever;
  return where.Invalid(absl::StrCat(field, ".prepend_scheme"), "not one of first, always, never");
}

absl::Status ParseNormalizer(const Json& json, const Where& where, const std::string& field,
                             std::vector<NormalizerStep>& steps) {
  if (json.is_null()) return absl::OkStatus();
  MNEMO_ASSIGN_OR_RETURN(std::string type, GetType(json, where, field));
  if (type == "Sequence") {
    const Json& list = Member(json, "normalizers");
    if (!list.is_array()) return where.Invalid(absl::StrCat(field, ".normalizers"), "not a list");
    for (size_t i = 0; i < list.size(); ++i) {
      MNEMO_RETURN_IF_ERROR(
          ParseNormalizer(list[i], where, absl::StrCat(field, ".normalizers[", i, "]"), steps));
    }
    return absl::OkStatus();
  }
  NormalizerStep step;
  if (type == "Prepend") {
    step.kind = NormalizerStep::Kind::kPrepend;
    MNEMO_ASSIGN_OR_RETURN(step.text, GetString(json, "prepend", where, field));
  } else if (type == "Replace") {
    step.kind = NormalizerStep::Kind::kReplace;
    MNEMO_ASSIGN_OR_RETURN(step.pattern, GetPattern(json, where, field));
    MNEMO_ASSIGN_OR_RETURN(step.text, GetString(json, "content", where, field));
  } else if (type == "NFC") {
    step.kind = NormalizerStep::Kind::kNfc;
  } else if (type == "NFD") {
    step.kind = NormalizerStep::Kind::kNfd;
  } else if (type == "NFKC") {
    step.kind = NormalizerStep::Kind::kNfkc;
  } else if (type == "NFKD") {
    step.kind = NormalizerStep::Kind::kNfkd;
  } else {
    return where.Unsupported(field, type, "Prepend, Replace, NFC, NFD, NFKC, NFKD, Sequence");
  }
  steps.push_back(std::move(step));
  return absl::OkStatus();
}

absl::StatusOr<SplitBehavior> GetBehavior(const Json& json, const Where& where,
                                          const std::string& field) {
  MNEMO_ASSIGN_OR_RETURN(std::string behavior, GetString(json, "behavior", where, field));
  if (behavior == "Isolated") return SplitBehavior::kIsolated;
  if (behavior == "Removed") return SplitBehavior::kRemoved;
  if (behavior == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (behavior == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (behavior == "Contiguous") return SplitBehavior::kContiguous;
  return where.Invalid(absl::StrCat(field, ".behavior"),
                       absl::StrCat("unknown \"", behavior, "\""));
}

absl::Status ParsePreTokenizer(const Json& json, const Where& where, const std::string& field,
                               std::vector<PreTokenizerStep>& steps) {
  if (json.is_null()) return absl::OkStatus();
  MNEMO_ASSIGN_OR_RETURN(std::string type, GetType(json, where, field));
  if (type == "Sequence") {
    const Json& list = Member(json, "pretokenizers");
    if (!list.is_array()) return where.Invalid(absl::StrCat(field, ".pretokenizers"), "not a list");
    for (size_t i = 0; i < list.size(); ++i) {
      MNEMO_RETURN_IF_ERROR(
          ParsePreTokenizer(list[i], where, absl::StrCat(field, ".pretokenizers[", i, "]"), steps));
    }
    return absl::OkStatus();
  }
  PreTokenizerStep step;
  if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::Kind::kByteLevel;
    MNEMO_ASSIGN_OR_RETURN(step.add_prefix_space,
                           GetBool(json, "add_prefix_space", true, where, field));
    MNEMO_ASSIGN_OR_RETURN(bool use_regex, GetBool(json, "use_regex", true, where, field));
    if (use_regex) {
      auto regex = Pcre2Regex::Create(kGpt2SplitRegex);
      if (!regex.ok()) return regex.status();
      step.regex = std::move(*regex);
    }
  } else if (type == "Split") {
    step.kind = PreTokenizerStep::Kind::kSplit;
    MNEMO_ASSIGN_OR_RETURN(step.regex, GetPattern(json, where, field));
    MNEMO_ASSIGN_OR_RETURN(step.behavior, GetBehavior(json, where, field));
    MNEMO_ASSIGN_OR_RETURN(step.invert, GetBool(json, "invert", false, where, field));
  } else if (type == "Metaspace") {
    step.kind = PreTokenizerStep::Kind::kMetaspace;
    MNEMO_ASSIGN_OR_RETURN(step.replacement, GetString(json, "replacement", where, field));
    MNEMO_ASSIGN_OR_RETURN(step.prepend, GetPrependScheme(json, where, field));
    MNEMO_ASSIGN_OR_RETURN(step.split, GetBool(json, "split", true, where, field));
  } else {
    return where.Unsupported(field, type, "ByteLevel, Split, Metaspace, Sequence");
  }
  steps.push_back(std::move(step));
  return absl::OkStatus();
}

// Decoder state gathered while walking a (possibly nested) decoder.
struct DecoderParse {
  std::vector<DecoderStep> steps;
  bool fused = false;
  int leading_spaces_dropped = 0;
  bool byte_level = false;
};

absl::Status ParseDecoder(const Json& json, const Where& where, const std::string& field,
                          DecoderParse& out) {
  constexpr char kSupported[] =
      "ByteLevel, Replace, ByteFallback, Fuse, Strip (leading spaces, after Fuse), Metaspace, "
      "Sequence";
  if (json.is_null()) return where.Unsupported(field, "null", kSupported);
  MNEMO_ASSIGN_OR_RETURN(std::string type, GetType(json, where, field));
  if (type == "Sequence") {
    const Json& list = Member(json, "decoders");
    if (!list.is_array()) return where.Invalid(absl::StrCat(field, ".decoders"), "not a list");
    for (size_t i = 0; i < list.size(); ++i) {
      MNEMO_RETURN_IF_ERROR(
          ParseDecoder(list[i], where, absl::StrCat(field, ".decoders[", i, "]"), out));
    }
    return absl::OkStatus();
  }
  if (type == "ByteLevel") {
    out.steps.push_back({DecoderStep::Kind::kByteLevel, "", ""});
    out.byte_level = true;
  } else if (type == "ByteFallback") {
    out.steps.push_back({DecoderStep::Kind::kByteFallback, "", ""});
  } else if (type == "Fuse") {
    out.fused = true;
  } else if (type == "Replace") {
    const Json& literal = Member(Member(json, "pattern"), "String");
    if (!literal.is_string()) {
      return where.Unsupported(absl::StrCat(field, ".pattern"), "Regex", "String");
    }
    MNEMO_ASSIGN_OR_RETURN(std::string content, GetString(json, "content", where, field));
    out.steps.push_back({DecoderStep::Kind::kReplace, literal.get<std::string>(), content});
  } else if (type == "Strip") {
    const Json& content = Member(json, "content");
    const Json& start = Member(json, "start");
    const Json& stop = Member(json, "stop");
    if (!out.fused || content != " " || !start.is_number_unsigned() ||
        !(stop.is_null() || stop == 0)) {
      return where.Unsupported(field, "Strip (other than of leading spaces after Fuse)",
                               kSupported);
    }
    if (start.get<uint64_t>() > kMaxStrip) {
      return where.Invalid(absl::StrCat(field, ".start"),
                           absl::StrCat("more than ", kMaxStrip, " spaces"));
    }
    out.leading_spaces_dropped += start.get<int>();
  } else if (type == "Metaspace") {
    MNEMO_ASSIGN_OR_RETURN(std::string replacement, GetString(json, "replacement", where, field));
    MNEMO_ASSIGN_OR_RETURN(PrependScheme scheme, GetPrependScheme(json, where, field));
    out.steps.push_back({DecoderStep::Kind::kReplace, replacement, " "});
    if (scheme != PrependScheme::kNever) out.leading_spaces_dropped += 1;
  } else {
    return where.Unsupported(field, type, kSupported);
  }
  return absl::OkStatus();
}

// The id of a special token named in the post-processor: an added token or vocabulary entry.
using TokenIdLookup = std::function<int(const std::string&)>;

absl::Status ParsePostProcessor(const Json& json, const Where& where, const std::string& field,
                                const TokenIdLookup& lookup, HfTokenizerParts& parts) {
  if (json.is_null()) return absl::OkStatus();
  MNEMO_ASSIGN_OR_RETURN(std::string type, GetType(json, where, field));
  if (type == "ByteLevel") return absl::OkStatus();  // offsets only
  if (type == "Sequence") {
    const Json& list = Member(json, "processors");
    if (!list.is_array()) return where.Invalid(absl::StrCat(field, ".processors"), "not a list");
    for (size_t i = 0; i < list.size(); ++i) {
      MNEMO_RETURN_IF_ERROR(ParsePostProcessor(
          list[i], where, absl::StrCat(field, ".processors[", i, "]"), lookup, parts));
    }
    return absl::OkStatus();
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    for (const char* key : {"cls", "sep"}) {
      const Json& pair = Member(json, key);
      if (!pair.is_array() || pair.size() != 2 || !pair[1].is_number_integer()) {
        return where.Invalid(absl::StrCat(field, ".", key), "not a [token, id] pair");
      }
    }
    parts.prefix_ids.push_back(Member(json, "cls")[1].get<int>());
    parts.suffix_ids.insert(parts.suffix_ids.begin(), Member(json, "sep")[1].get<int>());
    return absl::OkStatus();
  }
  if (type != "TemplateProcessing") {
    return where.Unsupported(field, type,
                             "TemplateProcessing, ByteLevel, BertProcessing, RobertaProcessing, "
                             "Sequence");
  }
  const Json& single = Member(json, "single");
  if (!single.is_array()) return where.Invalid(absl::StrCat(field, ".single"), "not a list");
  const Json& specials = Member(json, "special_tokens");
  std::vector<int> prefix, suffix;
  bool seen_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const std::string item_field = absl::StrCat(field, ".single[", i, "]");
    if (single[i].contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    const Json& name = Member(Member(single[i], "SpecialToken"), "id");
    if (!name.is_string()) return where.Invalid(item_field, "neither Sequence nor SpecialToken");
    const Json& ids = Member(Member(specials, name.get<std::string>().c_str()), "ids");
    std::vector<int>& into = seen_sequence ? suffix : prefix;
    if (ids.is_array()) {
      for (const Json& id : ids) {
        if (!id.is_number_integer())
          return where.Invalid(item_field, "special token ids not integers");
        into.push_back(id.get<int>());
      }
    } else {
      const int id = lookup(name.get<std::string>());
      if (id < 0) {
        return where.Invalid(item_field, absl::StrCat("special token \"", name.get<std::string>(),
                                                      "\" is not in the vocabulary"));
      }
      into.push_back(id);
    }
  }
  parts.prefix_ids.insert(parts.prefix_ids.end(), prefix.begin(), prefix.end());
  parts.suffix_ids.insert(parts.suffix_ids.end(), suffix.begin(), suffix.end());
  return absl::OkStatus();
}

absl::Status ParseModel(const Json& json, const Where& where, BpeConfig& config) {
  if (!json.is_object())
    return where.Invalid("model", json.is_null() ? "missing" : "not an object");
  const Json& type = Member(json, "type");
  const std::string type_name = type.is_string() ? type.get<std::string>() : "";
  if (!type.is_null() && type_name != "BPE") {
    return where.Unsupported("model.type", type.is_string() ? type_name : type.dump(), "BPE");
  }
  const Json& vocab = Member(json, "vocab");
  if (!vocab.is_object())
    return where.Invalid("model.vocab", vocab.is_null() ? "missing" : "not an object");
  config.vocab.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer()) {
      return where.Invalid("model.vocab",
                           absl::StrCat("the id of \"", it.key(), "\" is not an integer"));
    }
    if (const int64_t id = it.value().get<int64_t>(); id < 0 || id >= kMaxTokenIds) {
      return where.Invalid("model.vocab", absl::StrCat("the id of \"", it.key(),
                                                       "\" is outside [0, ", kMaxTokenIds, ")"));
    }
    config.vocab.emplace_back(it.key(), it.value().get<int>());
  }
  const Json& merges = Member(json, "merges");
  if (!merges.is_array())
    return where.Invalid("model.merges", merges.is_null() ? "missing" : "not a list");
  config.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& merge = merges[i];
    if (merge.is_string()) {  // "left right"
      const std::string& text = merge.get_ref<const std::string&>();
      const size_t space = text.find(' ', 1);
      if (space == std::string::npos) {
        return where.Invalid(absl::StrCat("model.merges[", i, "]"),
                             absl::StrCat("\"", text, "\" is not \"a b\""));
      }
      config.merges.emplace_back(text.substr(0, space), text.substr(space + 1));
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      config.merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
    } else {
      return where.Invalid(absl::StrCat("model.merges[", i, "]"),
                           "neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  const Json& dropout = Member(json, "dropout");
  if (!dropout.is_null() && !(dropout.is_number() && dropout.get<double>() == 0.0)) {
    return absl::UnimplementedError(absl::StrCat(where.Invalid("model.dropout", "").message(),
                                                 "BPE dropout is not supported (null or 0 only)"));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Json& value = Member(json, key);
    if (!value.is_null() && value != "") {
      return absl::UnimplementedError(absl::StrCat(
          where.Invalid(absl::StrCat("model.", key), "").message(), "not supported (null only)"));
    }
  }
  const Json& unk = Member(json, "unk_token");
  if (unk.is_string()) config.unk_token = unk.get<std::string>();
  MNEMO_ASSIGN_OR_RETURN(config.byte_fallback,
                         GetBool(json, "byte_fallback", false, where, "model"));
  MNEMO_ASSIGN_OR_RETURN(config.fuse_unk, GetBool(json, "fuse_unk", false, where, "model"));
  MNEMO_ASSIGN_OR_RETURN(config.ignore_merges,
                         GetBool(json, "ignore_merges", false, where, "model"));
  return absl::OkStatus();
}

absl::Status ParseAddedTokens(const Json& json, const Where& where, std::vector<AddedToken>& out) {
  if (json.is_null()) return absl::OkStatus();
  if (!json.is_array()) return where.Invalid("added_tokens", "not a list");
  for (size_t i = 0; i < json.size(); ++i) {
    const std::string field = absl::StrCat("added_tokens[", i, "]");
    const Json& token = json[i];
    AddedToken added;
    const Json& id = Member(token, "id");
    if (!id.is_number_integer())
      return where.Invalid(absl::StrCat(field, ".id"), "missing or not an integer");
    if (id.get<int64_t>() < 0 || id.get<int64_t>() >= kMaxTokenIds) {
      return where.Invalid(absl::StrCat(field, ".id"),
                           absl::StrCat("outside [0, ", kMaxTokenIds, ")"));
    }
    added.id = id.get<int>();
    MNEMO_ASSIGN_OR_RETURN(added.content, GetString(token, "content", where, field));
    MNEMO_ASSIGN_OR_RETURN(added.special, GetBool(token, "special", false, where, field));
    MNEMO_ASSIGN_OR_RETURN(added.single_word, GetBool(token, "single_word", false, where, field));
    MNEMO_ASSIGN_OR_RETURN(added.lstrip, GetBool(token, "lstrip", false, where, field));
    MNEMO_ASSIGN_OR_RETURN(added.rstrip, GetBool(token, "rstrip", false, where, field));
    MNEMO_ASSIGN_OR_RETURN(added.normalized,
                           GetBool(token, "normalized", !added.special, where, field));
    out.push_back(std::move(added));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<HfTokenizerParts> ParseTokenizerJson(std::string_view json_text,
                                                    const std::string& path) {
  const Where where(path);
  Json json = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return where.Invalid("(file)", "not valid JSON");
  if (!json.is_object()) return where.Invalid("(file)", "not a JSON object");

  HfTokenizerParts parts;
  BpeConfig bpe;
  MNEMO_RETURN_IF_ERROR(ParseModel(Member(json, "model"), where, bpe));
  std::vector<NormalizerStep> normalizer;
  MNEMO_RETURN_IF_ERROR(
      ParseNormalizer(Member(json, "normalizer"), where, "normalizer", normalizer));
  std::vector<PreTokenizerStep> pre_tokenizer;
  MNEMO_RETURN_IF_ERROR(
      ParsePreTokenizer(Member(json, "pre_tokenizer"), where, "pre_tokenizer", pre_tokenizer));
  DecoderParse decoder;
  MNEMO_RETURN_IF_ERROR(ParseDecoder(Member(json, "decoder"), where, "decoder", decoder));
  MNEMO_RETURN_IF_ERROR(ParseAddedTokens(Member(json, "added_tokens"), where, parts.added_tokens));

  bool byte_level = decoder.byte_level;
  for (const PreTokenizerStep& step : pre_tokenizer) {
    byte_level = byte_level || step.kind == PreTokenizerStep::Kind::kByteLevel;
  }
  parts.name = byte_level ? "bpe" : "sentencepiece-bpe";
  parts.normalizer = Normalizer(std::move(normalizer));
  parts.pre_tokenizer = PreTokenizer(std::move(pre_tokenizer));
  parts.decoder = TokenDecoder(std::move(decoder.steps), decoder.leading_spaces_dropped);
  absl::StatusOr<BpeModel> model = BpeModel::Create(std::move(bpe));
  if (!model.ok()) return where.Invalid("model", model.status().message());
  parts.model = std::move(*model);

  const TokenIdLookup lookup = [&parts](const std::string& token) {
    for (const AddedToken& added : parts.added_tokens) {
      if (added.content == token) return added.id;
    }
    return parts.model.TokenToId(token);
  };
  MNEMO_RETURN_IF_ERROR(
      ParsePostProcessor(Member(json, "post_processor"), where, "post_processor", lookup, parts));
  return parts;
}

}  // namespace mnemo::tokenizer
