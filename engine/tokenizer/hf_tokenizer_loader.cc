#include "engine/tokenizer/hf_tokenizer_loader.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/hf_tokenizer.h"
#include "engine/tokenizer/hf_tokenizer_json.h"
#include "engine/tokenizer/sentencepiece_tokenizer.h"  // SentencePieceOptions only
#include "engine/util/files.h"
#include "engine/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace mnemo::tokenizer {
namespace {

using Json = nlohmann::json;
using TokenIdLookup = std::function<int(const std::string&)>;

// A JSON file of the folder, or a null Json when it is absent.
absl::StatusOr<Json> ReadOptionalJson(const std::string& path) {
  if (!std::filesystem::exists(path)) return Json();
  MNEMO_ASSIGN_OR_RETURN(std::string text, util::ReadFile(path));
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a valid JSON object"));
  }
  return json;
}

const Json& Member(const Json& object, const char* key) {
  static const Json* const null = new Json();
  if (!object.is_object()) return *null;
  auto it = object.find(key);
  return it == object.end() ? *null : *it;
}

// An id field that may be an int or a list of ints; empty when absent or null.
absl::StatusOr<std::vector<int>> IdList(const Json& config, const char* key,
                                        const std::string& path) {
  const Json& value = Member(config, key);
  std::vector<int> ids;
  if (value.is_null()) return ids;
  if (value.is_number_integer()) {
    ids.push_back(value.get<int>());
    return ids;
  }
  if (value.is_array()) {
    for (const Json& id : value) {
      if (!id.is_number_integer()) break;
      ids.push_back(id.get<int>());
    }
    if (ids.size() == value.size()) return ids;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": ", key, ": not an integer or a list of integers"));
}

// A token named in tokenizer_config.json: a string or {"content": string}; nullopt when absent.
std::optional<std::string> TokenName(const Json& config, const char* key) {
  const Json& value = Member(config, key);
  if (value.is_string()) return value.get<std::string>();
  const Json& content = Member(value, "content");
  if (content.is_string()) return content.get<std::string>();
  return std::nullopt;
}

std::optional<bool> OptionalBool(const Json& config, const char* key) {
  const Json& value = Member(config, key);
  if (value.is_boolean()) return value.get<bool>();
  return std::nullopt;
}

struct FolderConfigs {
  std::string dir;
  Json tokenizer_config;   // tokenizer_config.json (null when absent)
  Json generation_config;  // generation_config.json
  Json model_config;       // config.json
  std::string Path(const char* file) const { return absl::StrCat(dir, "/", file); }
};

// eos_ids as the header describes; `lookup` finds a token named in tokenizer_config.json.
absl::StatusOr<std::vector<int>> ResolveEos(const FolderConfigs& configs,
                                            const TokenIdLookup& lookup) {
  MNEMO_ASSIGN_OR_RETURN(std::vector<int> ids, IdList(configs.generation_config, "eos_token_id",
                                                      configs.Path("generation_config.json")));
  if (!ids.empty()) return ids;
  MNEMO_ASSIGN_OR_RETURN(ids,
                         IdList(configs.model_config, "eos_token_id", configs.Path("config.json")));
  if (!ids.empty()) return ids;
  if (std::optional<std::string> name = TokenName(configs.tokenizer_config, "eos_token")) {
    const int id = lookup(*name);
    if (id < 0) {
      return absl::InvalidArgumentError(absl::StrCat(configs.Path("tokenizer_config.json"),
                                                     ": eos_token: \"", *name,
                                                     "\" is not in the vocabulary"));
    }
    ids.push_back(id);
  }
  return ids;
}

int ResolvePad(const FolderConfigs& configs, const TokenIdLookup& lookup) {
  if (std::optional<std::string> name = TokenName(configs.tokenizer_config, "pad_token")) {
    return lookup(*name);
  }
  const Json& id = Member(configs.generation_config, "pad_token_id");
  return id.is_number_integer() ? id.get<int>() : -1;
}

absl::Status CheckIds(const std::vector<int>& ids, int vocab_size, const std::string& what) {
  for (int id : ids) {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": id ", id, " is outside the vocabulary (size ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const Tokenizer>> LoadTokenizerJson(const FolderConfigs& configs) {
  const std::string path = configs.Path("tokenizer.json");
  MNEMO_ASSIGN_OR_RETURN(std::string text, util::ReadFile(path));
  MNEMO_ASSIGN_OR_RETURN(HfTokenizerParts parts, ParseTokenizerJson(text, path));
  const TokenIdLookup lookup = [&parts](const std::string& token) {
    for (const AddedToken& added : parts.added_tokens) {
      if (added.content == token) return added.id;
    }
    return parts.model.TokenToId(token);
  };
  // transformers' Llama-style tokenizers rebuild the template from these flags when set.
  const std::string config_path = configs.Path("tokenizer_config.json");
  for (const auto& [flag, token_key, ids] :
       {std::make_tuple("add_bos_token", "bos_token", &parts.prefix_ids),
        std::make_tuple("add_eos_token", "eos_token", &parts.suffix_ids)}) {
    const std::optional<bool> add = OptionalBool(configs.tokenizer_config, flag);
    if (!add.has_value()) continue;
    ids->clear();
    const std::optional<std::string> name = TokenName(configs.tokenizer_config, token_key);
    if (!*add || !name.has_value()) continue;
    const int id = lookup(*name);
    if (id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(config_path, ": ", token_key, ": \"", *name, "\" is not in the vocabulary"));
    }
    ids->push_back(id);
  }
  MNEMO_ASSIGN_OR_RETURN(parts.eos_ids, ResolveEos(configs, lookup));
  int vocab_size = parts.model.size();
  for (const AddedToken& added : parts.added_tokens)
    vocab_size = std::max(vocab_size, added.id + 1);
  MNEMO_RETURN_IF_ERROR(CheckIds(parts.eos_ids, vocab_size, "eos_token_id"));
  parts.pad_id = ResolvePad(configs, lookup);
  const int bos = parts.prefix_ids.empty() ? -1 : parts.prefix_ids.front();
  if (parts.pad_id == bos ||
      std::find(parts.eos_ids.begin(), parts.eos_ids.end(), parts.pad_id) != parts.eos_ids.end()) {
    parts.pad_id = -1;
  }
  absl::StatusOr<std::unique_ptr<HfTokenizer>> tokenizer = HfTokenizer::Create(std::move(parts));
  if (!tokenizer.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", tokenizer.status().message()));
  }
  return std::shared_ptr<const Tokenizer>(std::move(*tokenizer));
}

std::atomic<SentencePieceLoader> g_sentencepiece_loader{nullptr};

absl::StatusOr<std::shared_ptr<const Tokenizer>> LoadSentencePiece(const FolderConfigs& configs) {
  SentencePieceOptions options;
  options.add_bos = OptionalBool(configs.tokenizer_config, "add_bos_token").value_or(true);
  options.add_eos = OptionalBool(configs.tokenizer_config, "add_eos_token").value_or(false);
  // Ids from the config files; a named eos_token falls back to the model's own EOS.
  MNEMO_ASSIGN_OR_RETURN(options.eos_ids,
                         ResolveEos(configs, [](const std::string&) { return -1; }));
  const std::string path = configs.Path("tokenizer.model");
  SentencePieceLoader loader = g_sentencepiece_loader.load();
  if (loader == nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        configs.dir, " has tokenizer.model but no tokenizer.json; this program reads "
        "tokenizer.json only (libsentencepiece bundles its own protobuf, which cannot share a "
        "process with the server's gRPC and LibTorch). Write tokenizer.json once with "
        "transformers: AutoTokenizer.from_pretrained(DIR).save_pretrained(DIR)"));
  }
  MNEMO_ASSIGN_OR_RETURN(std::shared_ptr<const Tokenizer> tokenizer, loader(path, options));
  MNEMO_RETURN_IF_ERROR(CheckIds(tokenizer->eos_ids(), tokenizer->vocab_size(), "eos_token_id"));
  return tokenizer;
}

}  // namespace

void SetSentencePieceLoader(SentencePieceLoader loader) { g_sentencepiece_loader.store(loader); }

absl::StatusOr<std::shared_ptr<const Tokenizer>> LoadHfTokenizer(const std::string& dir) {
  FolderConfigs configs;
  configs.dir = dir;
  const bool has_json = std::filesystem::exists(configs.Path("tokenizer.json"));
  const bool has_model = std::filesystem::exists(configs.Path("tokenizer.model"));
  if (!has_json && !has_model) {
    return absl::NotFoundError(
        absl::StrCat(dir, ": no tokenizer.json or tokenizer.model (the model's tokenizer)"));
  }
  MNEMO_ASSIGN_OR_RETURN(configs.tokenizer_config,
                         ReadOptionalJson(configs.Path("tokenizer_config.json")));
  MNEMO_ASSIGN_OR_RETURN(configs.generation_config,
                         ReadOptionalJson(configs.Path("generation_config.json")));
  MNEMO_ASSIGN_OR_RETURN(configs.model_config, ReadOptionalJson(configs.Path("config.json")));
  return has_json ? LoadTokenizerJson(configs) : LoadSentencePiece(configs);
}

}  // namespace mnemo::tokenizer
