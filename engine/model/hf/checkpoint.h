// Checkpoint: the weights of a Hugging Face model folder, read tensor by tensor from
// model.safetensors or from the shards model.safetensors.index.json names (each file
// memory-mapped, SafetensorsFile). F32, F16 and BF16 tensors are converted to float32 as they
// are taken, one tensor at a time, so a large checkpoint passes through RAM once.
//
// The family takes every tensor it expects, with its shape; Finish then refuses any tensor
// left over (a checkpoint of a variant the family does not implement), except buffers
// transformers may save that carry no weights (rotary inv_freq, GPT-2's causal-mask "bias").
// Errors name the file and the tensor. Not thread-safe; used once, while loading.
#ifndef MNEMO_ENGINE_MODEL_HF_CHECKPOINT_H_
#define MNEMO_ENGINE_MODEL_HF_CHECKPOINT_H_

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/safetensors.h"

namespace mnemo::model::hf {

// The weight files of DIR: [DIR/model.safetensors] if it exists, else the shards
// DIR/model.safetensors.index.json names (sorted, each once). NOT_FOUND naming both when
// neither exists; INVALID_ARGUMENT for a malformed index.
absl::StatusOr<std::vector<std::string>> WeightFiles(const std::string& dir);

class Checkpoint {
 public:
  // Opens DIR's weights: model.safetensors, else model.safetensors.index.json's shards.
  // NOT_FOUND naming both when neither exists.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir);

  bool Has(const std::string& name) const { return where_.count(name) > 0; }
  // Tensor `name` as float32 on the CPU, checked to have `shape`. NOT_FOUND (missing) or
  // INVALID_ARGUMENT (wrong shape, not finite) naming the file and tensor.
  absl::StatusOr<torch::Tensor> Take(const std::string& name, std::vector<int64_t> shape);
  // OK when every tensor was taken (or is a weightless buffer); INVALID_ARGUMENT naming the
  // first unexpected one otherwise.
  absl::Status Finish() const;
  // The dtypes of the tensors taken, as written ("F32", "BF16", ...).
  const std::set<std::string>& dtypes() const { return dtypes_; }

 private:
  Checkpoint() = default;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> where_;  // tensor -> its file
  std::set<std::string> taken_;
  std::set<std::string> dtypes_;
};

}  // namespace mnemo::model::hf

#endif  // MNEMO_ENGINE_MODEL_HF_CHECKPOINT_H_
