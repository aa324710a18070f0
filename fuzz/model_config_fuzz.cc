// model_config_fuzz: a model folder's config.json, as loading it reads it:
// engine/model/model_config.cc (mnemo-xl: ParseModelConfig) or engine/model/hf/hf_config.cc
// (the Hugging Face families: ParseHfConfig, then SetWindow for --window / --sink_tokens).
//
// Input: config.json's text. Every parser runs on every input, whatever architecture the text
// names, so that one corpus covers them all. (family_registry.cc's ConfigArchitecture, which
// picks one, is left out: its headers, every family's and LibTorch's, would cost more compile
// time than its twenty lines are worth.)
//
// Checks:
//   - every error is INVALID_ARGUMENT (the loaders' contract);
//   - a mnemo-xl config that parses also validates, and what ModelConfigToJson writes of it
//     (mnemo-calibrate rewrites configs that way) parses back to the same config;
//   - SetWindow leaves the window it was given (mem_len + 1) and sink_tokens below it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "engine/model/hf/hf_config.h"
#include "engine/model/model_config.h"
#include "fuzz/fuzz_support.h"

namespace mnemo::fuzz {
namespace {

constexpr std::string_view kHfArchitectures[] = {"LlamaForCausalLM", "MistralForCausalLM",
                                                 "Qwen2ForCausalLM", "GPT2LMHeadModel"};

void CheckError(const absl::Status& status, absl::string_view step) {
  Note(absl::StrCat(step, ": ", status.ToString()));
  FUZZ_CHECK(status.ok() || absl::IsInvalidArgument(status),
             absl::StrCat(step, ": ", status.ToString()));
}

void CheckNative(const std::string& text) {
  absl::StatusOr<model::ModelConfig> config = model::ParseModelConfig(text);
  CheckError(config.status(), "ParseModelConfig");
  if (!config.ok()) return;
  FUZZ_CHECK(model::ValidateModelConfig(*config).ok(), "a parsed config does not validate");
  // What the transformer sizes its relative-position table with, before any weight is read.
  FUZZ_CHECK(config->MaxDistance() >= 1 && config->MaxDistance() <= config->clamp_len,
             absl::StrCat("MaxDistance() is ", config->MaxDistance()));
  const std::string written = model::ModelConfigToJson(*config);
  absl::StatusOr<model::ModelConfig> reread = model::ParseModelConfig(written);
  FUZZ_CHECK(reread.ok(), absl::StrCat("ModelConfigToJson wrote a config that does not parse: ",
                                       reread.status().ToString(), "\n", written));
  FUZZ_CHECK(model::ModelConfigToJson(*reread) == written,
             absl::StrCat("ModelConfigToJson is not stable:\n", written, "then\n",
                          model::ModelConfigToJson(*reread)));
}

void CheckHf(const std::string& text, std::string_view architecture) {
  absl::StatusOr<model::ModelConfig> config = model::hf::ParseHfConfig(text, architecture);
  CheckError(config.status(), "ParseHfConfig");
  if (!config.ok()) return;
  const int max_positions = config->decoder.max_positions;
  for (const auto& [window, sinks] :
       {std::pair{0, -1}, {2, 0}, {2, 1}, {max_positions, 0}, {config->mem_len + 1, 4}}) {
    model::ModelConfig copy = *config;
    const absl::Status set = model::hf::SetWindow(copy, window, sinks);
    CheckError(set, "SetWindow");
    if (!set.ok()) continue;
    FUZZ_CHECK(copy.mem_len >= 1 && (window == 0 || copy.mem_len == window - 1),
               absl::StrCat("SetWindow(", window, ", ", sinks, ") left mem_len ", copy.mem_len));
    FUZZ_CHECK(copy.decoder.sink_tokens >= 0 && copy.decoder.sink_tokens < copy.mem_len + 1,
               absl::StrCat("SetWindow(", window, ", ", sinks, ") left ", copy.decoder.sink_tokens,
                            " sink tokens in a window of ", copy.mem_len + 1));
  }
}

}  // namespace
}  // namespace mnemo::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mnemo::fuzz;
  const std::string text(reinterpret_cast<const char*>(data), size);
  CheckNative(text);
  for (std::string_view architecture : kHfArchitectures) CheckHf(text, architecture);
  return 0;
}
