// The registered model families (family.h): which architectures mnemo serves, and which
// family reads a given config.json.
//
// The list is fixed at build time, in family_registry.cc (registering a family is one line
// there); nothing is added at run time, so every function here is thread-safe and the families
// live for the whole program.
#ifndef MNEMO_ENGINE_MODEL_FAMILY_REGISTRY_H_
#define MNEMO_ENGINE_MODEL_FAMILY_REGISTRY_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/family.h"

namespace mnemo::model {

// Every registered family, the native one first.
const std::vector<const ModelFamily*>& RegisteredFamilies();

// The family serving `architecture`, or nullptr.
const ModelFamily* FindFamily(std::string_view architecture);

// The registered architectures, comma separated, for error messages: "mnemo-xl".
std::string SupportedArchitectures();

// The architecture config.json's text names: its "architecture" string (mnemo's own configs),
// else the first entry of its "architectures" list (Hugging Face's), else "mnemo-xl" (native
// configs from before the field was written). INVALID_ARGUMENT naming the field when it has
// the wrong type, or when the text is not a JSON object.
absl::StatusOr<std::string> ConfigArchitecture(const std::string& json_text);

// The family that reads config.json at `config_path` with text `json_text`. INVALID_ARGUMENT,
// one line naming the file, the field, the architecture and the supported ones, when no
// registered family serves it.
absl::StatusOr<const ModelFamily*> FamilyForConfig(const std::string& config_path,
                                                   const std::string& json_text);

}  // namespace mnemo::model

#endif  // MNEMO_ENGINE_MODEL_FAMILY_REGISTRY_H_
