#include "engine/model/family_registry.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model/hf/hf_family.h"
#include "engine/model/mnemo_xl_family.h"

namespace mnemo::model {

const std::vector<const ModelFamily*>& RegisteredFamilies() {
  // Register a family here (docs/adding-a-model-family.md). Never destroyed: the families are
  // stateless and used until exit.
  static const auto* const families = new std::vector<const ModelFamily*>{
      &MnemoXlFamily::Get(),
      &hf::HfFamily::Llama(),
      &hf::HfFamily::Mistral(),
      &hf::HfFamily::Qwen2(),
      &hf::HfFamily::Gpt2(),
  };
  return *families;
}

absl::Status ModelFamily::SetWindow(ModelConfig& /*config*/, int window, int sink_tokens) const {
  if (window == 0 && sink_tokens <= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--window and --sink_tokens apply to the Hugging Face families; ", std::string(architecture()),
      " keeps the memory sizes it was trained with (config.json mem_len, cmem_len, knn_mem_len)"));
}

const ModelFamily* FindFamily(std::string_view architecture) {
  for (const ModelFamily* family : RegisteredFamilies()) {
    if (family->architecture() == architecture) return family;
  }
  return nullptr;
}

std::string SupportedArchitectures() {
  std::vector<std::string> names;  // (Debian's absl::string_view is not std::string_view)
  for (const ModelFamily* family : RegisteredFamilies()) {
    names.emplace_back(family->architecture());
  }
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<std::string> ConfigArchitecture(const std::string& json_text) {
  using nlohmann::json;
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("config.json is not valid JSON: ", e.what()));
  }
  if (!j.is_object()) return absl::InvalidArgumentError("config.json must hold a JSON object");
  if (auto it = j.find("architecture"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) {
      return absl::InvalidArgumentError("config.json: field 'architecture' must be a string");
    }
    return it->get<std::string>();
  }
  if (auto it = j.find("architectures"); it != j.end() && !it->is_null()) {
    if (!it->is_array() || it->empty() || !(*it)[0].is_string()) {
      return absl::InvalidArgumentError(
          "config.json: field 'architectures' must be a non-empty list of strings");
    }
    return (*it)[0].get<std::string>();
  }
  return std::string(MnemoXlFamily::kArchitecture);
}

absl::StatusOr<const ModelFamily*> FamilyForConfig(const std::string& config_path,
                                                   const std::string& json_text) {
  absl::StatusOr<std::string> architecture = ConfigArchitecture(json_text);
  if (!architecture.ok()) {
    return absl::Status(architecture.status().code(),
                        absl::StrCat(config_path, ": ", architecture.status().message()));
  }
  if (const ModelFamily* family = FindFamily(*architecture)) return family;
  return absl::InvalidArgumentError(absl::StrCat(
      config_path, ": architecture '", *architecture,
      "' (field 'architecture' or 'architectures') is not served; supported architectures: ",
      SupportedArchitectures()));
}

}  // namespace mnemo::model
