// The Hugging Face model families: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM and
// GPT2LMHeadModel, served from the folder transformers' save_pretrained writes (config.json,
// model.safetensors or its shards, tokenizer.json or tokenizer.model, tokenizer_config.json,
// generation_config.json). One ModelFamily class, one static instance per architecture
// (family_registry.cc); the network is DecoderNetwork (decoder_network.h), the tokenizer
// tokenizer::LoadHfTokenizer's.
#ifndef MNEMO_ENGINE_MODEL_HF_HF_FAMILY_H_
#define MNEMO_ENGINE_MODEL_HF_HF_FAMILY_H_

#include <memory>
#include <string>
#include <string_view>

#include "engine/model/family.h"

namespace mnemo::model::hf {

class HfFamily : public ModelFamily {
 public:
  static const HfFamily& Llama();
  static const HfFamily& Mistral();
  static const HfFamily& Qwen2();
  static const HfFamily& Gpt2();

  std::string_view architecture() const override { return architecture_; }
  absl::StatusOr<ModelConfig> ParseConfig(const std::string& json_text) const override;
  absl::StatusOr<std::shared_ptr<const tokenizer::Tokenizer>> MakeTokenizer(
      const std::string& dir, const ModelConfig& config) const override;
  absl::StatusOr<std::unique_ptr<Network>> LoadNetwork(const std::string& dir,
                                                       const ModelConfig& config) const override;
  std::unique_ptr<Network> RandomNetwork(const ModelConfig& config, uint64_t seed) const override;
  absl::Status SetWindow(ModelConfig& config, int window, int sink_tokens) const override;

 private:
  explicit HfFamily(std::string_view architecture) : architecture_(architecture) {}
  const std::string_view architecture_;
};

}  // namespace mnemo::model::hf

#endif  // MNEMO_ENGINE_MODEL_HF_HF_FAMILY_H_
