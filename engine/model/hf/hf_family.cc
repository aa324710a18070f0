#include "engine/model/hf/hf_family.h"

#include "absl/strings/str_cat.h"
#include "engine/model/hf/checkpoint.h"
#include "engine/model/hf/decoder_network.h"
#include "engine/model/hf/hf_config.h"
#include "engine/tokenizer/hf_tokenizer_loader.h"

namespace mnemo::model::hf {

const HfFamily& HfFamily::Llama() {
  static const HfFamily family("LlamaForCausalLM");
  return family;
}
const HfFamily& HfFamily::Mistral() {
  static const HfFamily family("MistralForCausalLM");
  return family;
}
const HfFamily& HfFamily::Qwen2() {
  static const HfFamily family("Qwen2ForCausalLM");
  return family;
}
const HfFamily& HfFamily::Gpt2() {
  static const HfFamily family("GPT2LMHeadModel");
  return family;
}

absl::StatusOr<ModelConfig> HfFamily::ParseConfig(const std::string& json_text) const {
  return ParseHfConfig(json_text, architecture_);
}

absl::StatusOr<std::shared_ptr<const tokenizer::Tokenizer>> HfFamily::MakeTokenizer(
    const std::string& dir, const ModelConfig& config) const {
  absl::StatusOr<std::shared_ptr<const tokenizer::Tokenizer>> tokenizer =
      tokenizer::LoadHfTokenizer(dir);
  if (!tokenizer.ok()) return tokenizer.status();
  if ((*tokenizer)->vocab_size() > config.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, ": the tokenizer has ", (*tokenizer)->vocab_size(), " ids but config.json's "
        "vocab_size is ", config.vocab_size));
  }
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<Network>> HfFamily::LoadNetwork(const std::string& dir,
                                                               const ModelConfig& config) const {
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::Open(dir);
  if (!checkpoint.ok()) return checkpoint.status();
  absl::StatusOr<std::unique_ptr<DecoderNetwork>> network =
      DecoderNetwork::Load(config, **checkpoint);
  if (!network.ok()) return network.status();
  return std::unique_ptr<Network>(*std::move(network));
}

std::unique_ptr<Network> HfFamily::RandomNetwork(const ModelConfig& config, uint64_t seed) const {
  return DecoderNetwork::Random(config, seed);
}

absl::Status HfFamily::SetWindow(ModelConfig& config, int window, int sink_tokens) const {
  return hf::SetWindow(config, window, sink_tokens);
}

}  // namespace mnemo::model::hf
