// ExitClassifier: CALM's learned early-exit classifier (Schuster et al. 2022, §3.5), one small
// logistic regression per layer a token may leave after.
//
// For layer i < n_layers - 1 (0-based) and the layer's output h_i ([d_model], the residual
// stream before the shared final LayerNorm):
//   c_i(h) = sigmoid(w_i · norm(h) + b_i),  norm = LayerNorm without affine parameters
// (the per-layer weights absorb any scale and shift). Trained on the frozen model with binary
// cross-entropy on CALM's consistency labels, 1 when layer i's greedy token through the shared
// head equals the full model's (mnemo-train --exit_classifier, engine/training/
// exit_classifier_trainer.h), so c_i estimates P(exiting here changes nothing). At decode it
// costs one normalisation and one dot product per row and layer, where softmax response costs
// the head's [d_model, vocab] matmul, a softmax and a top-2.
//
// Stored beside the model as exit_classifier.safetensors ("weight" [L-1, d_model] and "bias"
// [L-1], float32), with the checksum of the weights it was trained for in its metadata. The
// base model's files, and so its fingerprint (datastore::ModelId), never change.
//
// Parameters only, no state between calls. Thread-safety as Model's: read-only once loaded, so
// every thread that runs the model (the loop thread, decode workers) uses it at once.
#ifndef MNEMO_ENGINE_MODEL_EXIT_CLASSIFIER_H_
#define MNEMO_ENGINE_MODEL_EXIT_CLASSIFIER_H_

#include <torch/nn/module.h>
#include <torch/types.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/model_config.h"

namespace mnemo::model {

class TransformerImpl;

// The classifier's file inside a model directory.
inline constexpr char kExitClassifierFile[] = "exit_classifier.safetensors";

class ExitClassifierImpl : public torch::nn::Module {
 public:
  // Zero weights and biases: c_i = 0.5 everywhere until trained or loaded.
  ExitClassifierImpl(int exit_layers, int d_model, float layer_norm_eps);

  int exit_layers() const { return static_cast<int>(weight_.size(0)); }
  int d_model() const { return static_cast<int>(weight_.size(1)); }

  // The classifier's input: hidden [..., d_model] -> [..., d_model] normalised.
  torch::Tensor Features(const torch::Tensor& hidden) const;
  // Logit of c_layer for hidden states leaving 0-based layer `layer` (< exit_layers):
  // [..., d_model] -> [...].
  torch::Tensor Logits(const torch::Tensor& hidden, int layer) const;
  // c_layer in [0, 1]: [..., d_model] -> [...]. Outside autograd on the CPU in one host pass
  // per row (host_confidence.h), else through LibTorch ops: the same value.
  torch::Tensor Confidence(const torch::Tensor& hidden, int layer) const;
  // Training: features [N, exit_layers, d_model] (from Features) -> logits [N, exit_layers].
  torch::Tensor AllLayerLogits(const torch::Tensor& features) const;

  const torch::Tensor& weight() const { return weight_; }  // [exit_layers, d_model]
  const torch::Tensor& bias() const { return bias_; }      // [exit_layers]

 private:
  torch::Tensor weight_;
  torch::Tensor bias_;
  const float eps_;
};
TORCH_MODULE(ExitClassifier);

// Identifies a network's weights: FNV-1a 64 over every parameter's name and float32 values,
// in named_parameters order; 16 lowercase hex digits. Cheap next to loading them.
std::string WeightsChecksum(const TransformerImpl& net);
// The same over any family's weights: FNV-1a over each name's bytes and its values as float32.
std::string WeightsChecksum(
    const std::vector<std::pair<std::string, torch::Tensor>>& named_weights);

// Writes `classifier` to `path` (float32, atomically) with `weights_checksum` (of the model it
// was trained for) and `metadata` (strings, e.g. how it was trained) in the header.
absl::Status SaveExitClassifier(const std::string& path, const ExitClassifierImpl& classifier,
                                const std::string& weights_checksum,
                                const std::map<std::string, std::string>& metadata = {});

// Reads a classifier for a model with `config` whose weights have `weights_checksum`.
// INVALID_ARGUMENT naming the file for wrong tensors or shapes; FAILED_PRECONDITION when it was
// trained for other weights (a retrained model keeps a stale file otherwise).
absl::StatusOr<ExitClassifier> LoadExitClassifier(const std::string& path,
                                                  const ModelConfig& config,
                                                  const std::string& weights_checksum);

// The metadata of a classifier file (e.g. its training summary), without loading it.
absl::StatusOr<std::map<std::string, std::string>> ReadExitClassifierMetadata(
    const std::string& path);

}  // namespace mnemo::model

#endif  // MNEMO_ENGINE_MODEL_EXIT_CLASSIFIER_H_
