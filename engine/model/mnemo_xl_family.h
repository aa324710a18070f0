// The native family, "mnemo-xl" (docs/design.md §2): Transformer-XL relative attention over a
// raw ring, compressive memory and a kNN memory layer; a byte vocabulary (ByteTokenizer); the
// directory written by the trainer (config.json read by ParseModelConfig, model.safetensors
// named after TransformerImpl's parameters).
//
// MnemoXlNetwork adapts the native network (TransformerImpl, transformer.h) to the Network
// interface without changing it: every call forwards to the TransformerImpl, so the native
// family behaves exactly as before the seam. Code that trains the native network, or runs its
// layers itself, reaches the TransformerImpl through transformer() (Model::transformer()).
#ifndef MNEMO_ENGINE_MODEL_MNEMO_XL_FAMILY_H_
#define MNEMO_ENGINE_MODEL_MNEMO_XL_FAMILY_H_

#include <memory>
#include <string>
#include <string_view>

#include "engine/model/family.h"
#include "engine/model/transformer.h"

namespace mnemo::model {

// Owns the native network (a shared holder: the trainer may hold the same one). Threads: as
// Network's (family.h).
class MnemoXlNetwork : public Network {
 public:
  explicit MnemoXlNetwork(Transformer transformer);

  torch::Tensor ForwardSegment(const torch::Tensor& tokens, memory::SessionMemory& memory,
                               torch::Tensor* knn_lm_keys) override;
  torch::Tensor ForwardSegmentWithExit(const torch::Tensor& tokens, memory::SessionMemory& memory,
                                       float threshold, ExitMeasure measure,
                                       const ExitClassifierImpl* classifier,
                                       torch::Tensor* exit_layers) override;
  torch::Tensor Logits(const torch::Tensor& hidden) override;
  memory::MemoryShape MemoryShapeFor(const MemoryOptions& options) const override;
  memory::SessionMemory NewMemory(const MemoryOptions& options,
                                  const torch::Device& device) const override;
  int num_layers() const override;
  torch::Tensor Embed(const torch::Tensor& tokens) override;
  torch::Tensor DecodeLayer(int layer, const torch::Tensor& h, DecodeStepState& rows,
                            const ActiveRows& active, torch::Tensor* ffn_input) override;
  int64_t ParameterCount() const override;
  std::string WeightsChecksum() const override;
  absl::Status PrepareForServing(const torch::Device& device,
                                 torch::ScalarType weight_dtype) override;
  absl::Status Save(const std::string& dir, const ModelConfig& config) const override;

  Transformer& transformer() { return transformer_; }

 private:
  Transformer transformer_;  // never empty
};

class MnemoXlFamily : public ModelFamily {
 public:
  static constexpr std::string_view kArchitecture = "mnemo-xl";
  static const MnemoXlFamily& Get();

  std::string_view architecture() const override { return kArchitecture; }
  // ParseModelConfig (model_config.h).
  absl::StatusOr<ModelConfig> ParseConfig(const std::string& json_text) const override;
  // The byte tokenizer; the directory holds no tokenizer file.
  absl::StatusOr<std::shared_ptr<const tokenizer::Tokenizer>> MakeTokenizer(
      const std::string& dir, const ModelConfig& config) const override;
  // DIR/model.safetensors, every parameter of TransformerImpl by its name (LoadWeights).
  absl::StatusOr<std::unique_ptr<Network>> LoadNetwork(const std::string& dir,
                                                       const ModelConfig& config) const override;
  std::unique_ptr<Network> RandomNetwork(const ModelConfig& config, uint64_t seed) const override;
};

}  // namespace mnemo::model

#endif  // MNEMO_ENGINE_MODEL_MNEMO_XL_FAMILY_H_
