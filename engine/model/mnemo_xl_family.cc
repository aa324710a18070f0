#include "engine/model/mnemo_xl_family.h"

#include <c10/core/InferenceMode.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/byte_tokenizer.h"
#include "engine/util/status_macros.h"

namespace mnemo::model {

MnemoXlNetwork::MnemoXlNetwork(Transformer transformer) : transformer_(std::move(transformer)) {}

torch::Tensor MnemoXlNetwork::ForwardSegment(const torch::Tensor& tokens,
                                             memory::SessionMemory& memory,
                                             torch::Tensor* knn_lm_keys) {
  return transformer_->forward(tokens, memory, /*layer_outputs=*/nullptr, knn_lm_keys);
}

torch::Tensor MnemoXlNetwork::ForwardSegmentWithExit(const torch::Tensor& tokens,
                                                     memory::SessionMemory& memory,
                                                     float threshold, ExitMeasure measure,
                                                     const ExitClassifierImpl* classifier,
                                                     torch::Tensor* exit_layers) {
  return transformer_->ForwardWithExit(tokens, memory, threshold, measure, classifier,
                                       exit_layers);
}

torch::Tensor MnemoXlNetwork::Logits(const torch::Tensor& hidden) {
  return transformer_->Logits(hidden);
}

namespace {

// -1 = the config's kNN length, 0 = none.
int KnnLength(const MemoryOptions& options) {
  return !options.knn ? 0 : options.knn_mem_len > 0 ? options.knn_mem_len : -1;
}

}  // namespace

memory::MemoryShape MnemoXlNetwork::MemoryShapeFor(const MemoryOptions& options) const {
  return transformer_->MemoryShapeFor(/*batch=*/1, options.compressive, KnnLength(options),
                                      /*knn_store=*/true, options.knn_exact_threshold,
                                      options.half_rings);
}

memory::SessionMemory MnemoXlNetwork::NewMemory(const MemoryOptions& options,
                                                const torch::Device& device) const {
  c10::InferenceMode inference;
  return transformer_->NewMemory(/*batch=*/1, device, options.compressive, KnnLength(options),
                                 /*knn_store=*/true, options.knn_exact_threshold,
                                 options.half_rings);
}

int MnemoXlNetwork::num_layers() const { return transformer_->num_layers(); }

torch::Tensor MnemoXlNetwork::Embed(const torch::Tensor& tokens) {
  return transformer_->Embed(tokens);
}

torch::Tensor MnemoXlNetwork::DecodeLayer(int layer, const torch::Tensor& h,
                                          DecodeStepState& rows, const ActiveRows& active,
                                          torch::Tensor* ffn_input) {
  return transformer_->block(layer)->Decode(h, layer, rows, active, transformer_->sinusoid(),
                                            ffn_input);
}

int64_t MnemoXlNetwork::ParameterCount() const {
  int64_t total = 0;
  for (const torch::Tensor& p : transformer_->parameters()) total += p.numel();
  return total;
}

std::string MnemoXlNetwork::WeightsChecksum() const {
  return model::WeightsChecksum(*transformer_);
}

absl::Status MnemoXlNetwork::PrepareForServing(const torch::Device& device,
                                               torch::ScalarType weight_dtype) {
  if (weight_dtype != torch::kFloat32 && !transformer_->RoundWeights(weight_dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model ", transformer_->config().name, " has weights beyond float16's range (|w| > 65504): "
        "weight_dtype float16 cannot hold them"));
  }
  transformer_->to(device);
  transformer_->eval();
  transformer_->CachePositionTables(weight_dtype);
  return absl::OkStatus();
}

absl::Status MnemoXlNetwork::Save(const std::string& dir, const ModelConfig& config) const {
  return SaveModelDirectory(dir, config, *transformer_);
}

const MnemoXlFamily& MnemoXlFamily::Get() {
  static const MnemoXlFamily family;
  return family;
}

absl::StatusOr<ModelConfig> MnemoXlFamily::ParseConfig(const std::string& json_text) const {
  return ParseModelConfig(json_text);
}

absl::StatusOr<std::shared_ptr<const tokenizer::Tokenizer>> MnemoXlFamily::MakeTokenizer(
    const std::string& /*dir*/, const ModelConfig& /*config*/) const {
  return std::make_shared<const tokenizer::ByteTokenizer>();
}

absl::StatusOr<std::unique_ptr<Network>> MnemoXlFamily::LoadNetwork(
    const std::string& dir, const ModelConfig& config) const {
  Transformer transformer(config);
  MNEMO_RETURN_IF_ERROR(LoadWeights(dir, *transformer));
  return std::make_unique<MnemoXlNetwork>(std::move(transformer));
}

std::unique_ptr<Network> MnemoXlFamily::RandomNetwork(const ModelConfig& config,
                                                      uint64_t seed) const {
  Transformer transformer(config);
  transformer->InitializeWeights(seed);
  return std::make_unique<MnemoXlNetwork>(std::move(transformer));
}

}  // namespace mnemo::model
