#include "engine/model/exit_classifier.h"

#include <c10/util/Exception.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/model/host_confidence.h"
#include "engine/model/safetensors.h"
#include "engine/model/transformer.h"
#include "engine/util/shape_string.h"
#include "engine/util/status_macros.h"

namespace mnemo::model {
namespace {

constexpr char kChecksumKey[] = "mnemo_weights_checksum";
constexpr char kKindKey[] = "mnemo_exit_classifier";
constexpr char kKind[] = "linear-on-layernorm";

}  // namespace

ExitClassifierImpl::ExitClassifierImpl(int exit_layers, int d_model, float layer_norm_eps)
    : eps_(layer_norm_eps) {
  weight_ = register_parameter("weight", torch::zeros({exit_layers, d_model}));
  bias_ = register_parameter("bias", torch::zeros({exit_layers}));
}

torch::Tensor ExitClassifierImpl::Features(const torch::Tensor& hidden) const {
  return torch::layer_norm(hidden, {hidden.size(-1)}, /*weight=*/{}, /*bias=*/{}, eps_);
}

torch::Tensor ExitClassifierImpl::Logits(const torch::Tensor& hidden, int layer) const {
  return torch::matmul(Features(hidden), weight_[layer]) + bias_[layer];
}

torch::Tensor ExitClassifierImpl::Confidence(const torch::Tensor& hidden, int layer) const {
  if (ClassifierConfidenceOnHost(hidden) && weight_.device().is_cpu() &&
      weight_.scalar_type() == torch::kFloat32 && weight_.is_contiguous() &&
      bias_.is_contiguous()) {
    TORCH_CHECK(layer >= 0 && layer < exit_layers(), "exit classifier: no layer ", layer);
    return ClassifierConfidence(hidden, weight_.data_ptr<float>() + int64_t{layer} * d_model(),
                                bias_.data_ptr<float>()[layer], eps_);
  }
  return torch::sigmoid(Logits(hidden, layer));
}

torch::Tensor ExitClassifierImpl::AllLayerLogits(const torch::Tensor& features) const {
  return (features * weight_.unsqueeze(0)).sum(-1) + bias_.unsqueeze(0);  // [N, L-1]
}

std::string WeightsChecksum(
    const std::vector<std::pair<std::string, torch::Tensor>>& named_weights) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  auto add = [&hash](const void* data, size_t n) {
    const unsigned char* bytes = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
      hash ^= bytes[i];
      hash *= 0x100000001b3ULL;
    }
  };
  torch::NoGradGuard no_grad;
  for (const auto& [name, weight] : named_weights) {
    add(name.data(), name.size());
    torch::Tensor values = weight.detach().to(torch::kCPU, torch::kFloat32).contiguous();
    // Whole 64-bit words per step: the byte loop over every weight would cost ~0.1 s at 8M
    // parameters; this is FNV-1a's structure over words instead of bytes.
    const size_t bytes = static_cast<size_t>(values.numel()) * sizeof(float);
    const unsigned char* data = static_cast<const unsigned char*>(values.data_ptr());
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
      uint64_t word;
      std::memcpy(&word, data + i, 8);
      hash ^= word;
      hash *= 0x100000001b3ULL;
    }
    add(data + i, bytes - i);
  }
  return absl::StrFormat("%016x", hash);
}

std::string WeightsChecksum(const TransformerImpl& net) {
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& item : net.named_parameters()) named.emplace_back(item.key(), item.value());
  return WeightsChecksum(named);
}

absl::Status SaveExitClassifier(const std::string& path, const ExitClassifierImpl& classifier,
                                const std::string& weights_checksum,
                                const std::map<std::string, std::string>& metadata) {
  std::map<std::string, std::string> header = metadata;
  header["format"] = "pt";
  header[kKindKey] = kKind;
  header[kChecksumKey] = weights_checksum;
  try {
    std::vector<std::pair<std::string, torch::Tensor>> tensors = {
        {"weight", classifier.weight().detach().to(torch::kCPU, torch::kFloat32)},
        {"bias", classifier.bias().detach().to(torch::kCPU, torch::kFloat32)}};
    return WriteSafetensors(path, tensors, header);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("saving ", path, ": ", e.what_without_backtrace()));
  }
}

absl::StatusOr<std::map<std::string, std::string>> ReadExitClassifierMetadata(
    const std::string& path) {
  MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(path));
  return file->metadata();
}

absl::StatusOr<ExitClassifier> LoadExitClassifier(const std::string& path,
                                                  const ModelConfig& config,
                                                  const std::string& weights_checksum) {
  MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(path));
  const auto kind = file->metadata().find(kKindKey);
  if (kind == file->metadata().end() || kind->second != kKind) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not an exit classifier (metadata ",
                                                   kKindKey, " is not ", kKind, ")"));
  }
  const auto checksum = file->metadata().find(kChecksumKey);
  if (checksum == file->metadata().end() || checksum->second != weights_checksum) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " was trained for other weights (checksum ",
        checksum == file->metadata().end() ? "missing" : checksum->second, ", this model's ",
        weights_checksum, "); retrain it with mnemo-train --exit_classifier or delete it"));
  }
  const int64_t layers = config.n_layers - 1;
  const std::map<std::string, std::vector<int64_t>> expected = {
      {"weight", {layers, config.d_model}}, {"bias", {layers}}};
  for (const auto& [name, entry] : file->entries()) {
    if (expected.count(name) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": unexpected tensor '", name, "'"));
    }
  }
  try {
    ExitClassifier classifier(static_cast<int>(layers), config.d_model, config.layer_norm_eps);
    torch::NoGradGuard no_grad;
    for (const auto& [name, shape] : expected) {
      auto it = file->entries().find(name);
      if (it == file->entries().end()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", name, "' is missing"));
      }
      if (it->second.shape != shape) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", name, "' has shape ",
                                                       util::ShapeString(it->second.shape),
                                                       ", the model needs ", util::ShapeString(shape)));
      }
      MNEMO_ASSIGN_OR_RETURN(torch::Tensor value, file->ReadFloat(name));
      if (!torch::isfinite(value).all().item<bool>()) {
        return absl::DataLossError(
            absl::StrCat(path, ": tensor '", name, "' holds NaN or infinite values"));
      }
      (name == "weight" ? classifier->weight() : classifier->bias()).copy_(value);
    }
    return classifier;
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("loading ", path, ": ", e.what_without_backtrace()));
  }
}

}  // namespace mnemo::model
