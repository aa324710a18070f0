#include "engine/model/model.h"

#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <filesystem>
#include <optional>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model/family.h"
#include "engine/model/family_registry.h"
#include "engine/model/mnemo_xl_family.h"
#include "engine/model/safetensors.h"
#include "engine/util/status_macros.h"

namespace mnemo::model {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path.string(), ": cannot open"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string Shape(torch::IntArrayRef sizes) {
  return absl::StrCat("[", absl::StrJoin(sizes, ", "), "]");
}

// Copies every parameter of `transformer` from `file`; the file must hold exactly those.
absl::Status LoadParameters(TransformerImpl& transformer, const SafetensorsFile& file) {
  torch::NoGradGuard no_grad;
  auto params = transformer.named_parameters();
  for (auto& item : params) {
    const std::string& name = item.key();
    auto it = file.entries().find(name);
    if (it == file.entries().end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          file.path(), ": tensor '", name, "' is missing (the file does not match config.json)"));
    }
    if (it->second.shape != item.value().sizes().vec()) {
      return absl::InvalidArgumentError(absl::StrCat(
          file.path(), ": tensor '", name, "' has shape ", Shape(it->second.shape),
          " but config.json implies ", Shape(item.value().sizes())));
    }
    if (!torch::isFloatingType(it->second.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(file.path(), ": tensor '", name,
                                                     "' has non-float dtype ",
                                                     it->second.dtype_name));
    }
    MNEMO_ASSIGN_OR_RETURN(torch::Tensor value, file.ReadFloat(name));
    if (!torch::isfinite(value).all().item<bool>()) {
      return absl::DataLossError(
          absl::StrCat(file.path(), ": tensor '", name, "' holds NaN or infinite values"));
    }
    item.value().copy_(value);
  }
  for (const auto& [name, entry] : file.entries()) {
    if (params.find(name) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          file.path(), ": unexpected tensor '", name, "' (the file does not match config.json)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

Model::Model(ModelConfig config, const LoadOptions& options, const ModelFamily& family,
             std::unique_ptr<Network> network,
             std::shared_ptr<const tokenizer::Tokenizer> tokenizer)
    : config_(std::move(config)),
      device_(options.device),
      weight_dtype_(options.weight_dtype),
      family_(&family),
      network_(std::move(network)),
      tokenizer_(std::move(tokenizer)) {}

Model::~Model() = default;

absl::StatusOr<std::unique_ptr<Model>> Model::Make(
    ModelConfig config, const LoadOptions& options, const ModelFamily& family,
    std::unique_ptr<Network> network, std::shared_ptr<const tokenizer::Tokenizer> tokenizer) {
  if (options.weight_dtype != torch::kFloat32) {
    const std::string name = WeightDtypeName(options.weight_dtype);
    if (options.weight_dtype != torch::kFloat16 && options.weight_dtype != torch::kBFloat16) {
      return absl::InvalidArgumentError(absl::StrCat("weight_dtype ", name, " is not served"));
    }
    if (!options.device.is_cpu()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "weight_dtype ", name, " is for the CPU; device is ", options.device.str()));
    }
  }
  MNEMO_RETURN_IF_ERROR(network->PrepareForServing(options.device, options.weight_dtype));
  return std::unique_ptr<Model>(new Model(std::move(config), options, family, std::move(network),
                                          std::move(tokenizer)));
}

Transformer& Model::transformer() {
  auto* native = dynamic_cast<MnemoXlNetwork*>(network_.get());
  TORCH_CHECK(native != nullptr, "model ", config_.name, " is of family ",
              family_->architecture(), ", which has no native Transformer");
  return native->transformer();
}

namespace {

// DIR/config.json's path and text, and the family that reads it.
struct ConfigFile {
  std::string path;
  std::string text;
  const ModelFamily* family = nullptr;
};

absl::StatusOr<ConfigFile> ReadConfigFile(const std::string& dir) {
  const fs::path root(dir);
  if (!fs::is_directory(root)) {
    return absl::NotFoundError(absl::StrCat("model directory ", dir, " does not exist"));
  }
  ConfigFile file;
  file.path = (root / "config.json").string();
  MNEMO_ASSIGN_OR_RETURN(file.text, ReadFile(file.path));
  MNEMO_ASSIGN_OR_RETURN(file.family, FamilyForConfig(file.path, file.text));
  return file;
}

absl::StatusOr<ModelConfig> ParseConfigFile(const ConfigFile& file) {
  absl::StatusOr<ModelConfig> config = file.family->ParseConfig(file.text);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(file.path, ": ", config.status().message()));
  }
  return config;
}

}  // namespace

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& dir) {
  MNEMO_ASSIGN_OR_RETURN(ConfigFile file, ReadConfigFile(dir));
  return ParseConfigFile(file);
}

absl::Status LoadWeights(const std::string& dir, TransformerImpl& transformer) {
  MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                         SafetensorsFile::Open((fs::path(dir) / "model.safetensors").string()));
  try {
    return LoadParameters(transformer, *file);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("loading ", dir, ": ", e.what_without_backtrace()));
  }
}

absl::Status SaveModelDirectory(const std::string& dir, const ModelConfig& config,
                                const TransformerImpl& transformer, bool bf16) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create ", dir, ": ", error.message()));
  }
  {
    std::ofstream out(fs::path(dir) / "config.json", std::ios::trunc);
    out << ModelConfigToJson(config);
    if (!out) return absl::DataLossError(absl::StrCat("cannot write ", dir, "/config.json"));
  }
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& item : transformer.named_parameters()) {
    tensors.emplace_back(item.key(), item.value().detach().to(
                                         torch::kCPU, bf16 ? torch::kBFloat16 : torch::kFloat32));
  }
  return WriteSafetensors((fs::path(dir) / "model.safetensors").string(), tensors,
                          {{"format", "pt"}, {"mnemo_architecture", "mnemo-xl"}});
}

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& dir,
                                                   const LoadOptions& options) {
  MNEMO_ASSIGN_OR_RETURN(ConfigFile file, ReadConfigFile(dir));
  MNEMO_ASSIGN_OR_RETURN(ModelConfig config, ParseConfigFile(file));
  const ModelFamily& family = *file.family;
  if (options.window != 0 || options.sink_tokens != -1) {
    if (absl::Status s = family.SetWindow(config, options.window, options.sink_tokens); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(dir, ": ", s.message()));
    }
  }
  MNEMO_ASSIGN_OR_RETURN(std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
                         family.MakeTokenizer(dir, config));
  try {
    MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<Network> network, family.LoadNetwork(dir, config));
    const fs::path classifier_path = fs::path(dir) / kExitClassifierFile;
    ExitClassifier classifier{nullptr};
    std::error_code error;
    if (fs::exists(classifier_path, error)) {
      MNEMO_ASSIGN_OR_RETURN(classifier, LoadExitClassifier(classifier_path.string(), config,
                                                            network->WeightsChecksum()));
    } else if (config.exit_measure == ExitMeasure::kClassifier) {
      return absl::FailedPreconditionError(absl::StrCat(
          dir, "/config.json: exit_measure is classifier but ", classifier_path.string(),
          " does not exist (train it with mnemo-train --exit_classifier)"));
    }
    MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                           Make(config, options, family, std::move(network), std::move(tokenizer)));
    if (classifier) model->SetExitClassifier(std::move(classifier));
    return model;
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("loading ", dir, ": ", e.what_without_backtrace()));
  }
}

void Model::SetExitClassifier(ExitClassifier classifier) {
  exit_classifier_ = std::move(classifier);
  if (exit_classifier_) {
    exit_classifier_->to(device_);
    exit_classifier_->eval();
  }
}

absl::Status Model::CheckExitMeasure(ExitMeasure measure) const {
  if (measure == ExitMeasure::kClassifier && exit_classifier() == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model ", config_.name, " has no exit classifier (", kExitClassifierFile,
        " in its directory; train one with mnemo-train --exit_classifier)"));
  }
  return absl::OkStatus();
}

std::unique_ptr<Model> Model::FromTransformer(Transformer transformer,
                                              const LoadOptions& options) {
  ModelConfig config = transformer->config();
  const MnemoXlFamily& family = MnemoXlFamily::Get();
  absl::StatusOr<std::shared_ptr<const tokenizer::Tokenizer>> tokenizer =
      family.MakeTokenizer(/*dir=*/"", config);
  TORCH_CHECK(tokenizer.ok(), tokenizer.status().ToString());
  absl::StatusOr<std::unique_ptr<Model>> model =
      Make(config, options, family, std::make_unique<MnemoXlNetwork>(std::move(transformer)),
           *std::move(tokenizer));
  TORCH_CHECK(model.ok(), model.status().ToString());
  return *std::move(model);
}

std::unique_ptr<Model> Model::Random(const ModelConfig& config, uint64_t seed,
                                     const LoadOptions& options) {
  const MnemoXlFamily& family = MnemoXlFamily::Get();
  absl::StatusOr<std::shared_ptr<const tokenizer::Tokenizer>> tokenizer =
      family.MakeTokenizer(/*dir=*/"", config);
  TORCH_CHECK(tokenizer.ok(), tokenizer.status().ToString());
  absl::StatusOr<std::unique_ptr<Model>> model =
      Make(config, options, family, family.RandomNetwork(config, seed), *std::move(tokenizer));
  TORCH_CHECK(model.ok(), model.status().ToString());
  return *std::move(model);
}

namespace {

// true for "float16", false for "float32"; INVALID_ARGUMENT naming `what` otherwise.
absl::StatusOr<bool> ParseFloat16Choice(absl::string_view what, absl::string_view value) {
  if (value == "float32") return false;
  if (value == "float16") return true;
  return absl::InvalidArgumentError(
      absl::StrCat(what, " must be float32 or float16, got '", value, "'"));
}

}  // namespace

absl::StatusOr<bool> ParseKvDtype(absl::string_view kv_dtype) {
  return ParseFloat16Choice("kv_dtype", kv_dtype);
}

absl::StatusOr<torch::ScalarType> ParseWeightDtype(absl::string_view weight_dtype) {
  if (weight_dtype == "float32") return torch::kFloat32;
  if (weight_dtype == "float16") return torch::kFloat16;
  if (weight_dtype == "bfloat16") return torch::kBFloat16;
  return absl::InvalidArgumentError(absl::StrCat(
      "weight_dtype must be float32, float16 or bfloat16, got '", weight_dtype, "'"));
}

std::string WeightDtypeName(torch::ScalarType weight_dtype) {
  switch (weight_dtype) {
    case torch::kFloat32: return "float32";
    case torch::kFloat16: return "float16";
    case torch::kBFloat16: return "bfloat16";
    default: return c10::toString(weight_dtype);
  }
}

memory::MemoryShape Model::MemoryShapeFor(const MemoryOptions& options) const {
  return network_->MemoryShapeFor(options);
}

memory::SessionMemory Model::NewMemory(const MemoryOptions& options,
                                       memory::MemoryPool* pool) const {
  const memory::MemoryShape shape = MemoryShapeFor(options);
  if (pool != nullptr) {
    std::optional<memory::SessionMemory> recycled = pool->Take(shape, device_, torch::kFloat32);
    if (recycled.has_value()) return *std::move(recycled);
  }
  return network_->NewMemory(options, device_);
}

int64_t Model::max_sequence() const { return network_->max_sequence(); }

absl::Status Model::CheckLength(int64_t position, int64_t count) const {
  const int64_t limit = max_sequence();
  if (limit >= 0 && position + count > limit) {
    return absl::OutOfRangeError(absl::StrCat(
        "model ", config_.name, " sees at most ", limit, " positions (its learned position "
        "table); this sequence would reach ", position + count));
  }
  return absl::OkStatus();
}

absl::Status Model::CheckTokens(absl::Span<const int> tokens) const {
  if (tokens.empty()) return absl::InvalidArgumentError("Forward needs at least one token");
  for (int id : tokens) {
    if (id < 0 || id >= config_.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is outside the vocabulary [0, ", config_.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

torch::Tensor Model::TokenTensor(absl::Span<const int> tokens) const {
  std::vector<int64_t> ids(tokens.begin(), tokens.end());
  return torch::tensor(ids, torch::kInt64).view({1, static_cast<int64_t>(ids.size())}).to(device_);
}

absl::StatusOr<torch::Tensor> Model::Forward(absl::Span<const int> tokens,
                                             memory::SessionMemory& memory, Outputs outputs,
                                             torch::Tensor* knn_lm_keys) {
  MNEMO_RETURN_IF_ERROR(CheckTokens(tokens));
  MNEMO_RETURN_IF_ERROR(CheckLength(memory.next_position(), static_cast<int64_t>(tokens.size())));
  try {
    c10::InferenceMode inference;
    const int64_t n = static_cast<int64_t>(tokens.size());
    torch::Tensor all = TokenTensor(tokens);  // [1, n]
    std::vector<torch::Tensor> logprobs, keys;
    for (int64_t start = 0; start < n; start += config_.seg_len) {
      const int64_t length = std::min<int64_t>(config_.seg_len, n - start);
      torch::Tensor segment_keys;
      torch::Tensor hidden = network_->ForwardSegment(
          all.narrow(1, start, length), memory, knn_lm_keys != nullptr ? &segment_keys : nullptr);
      if (outputs == Outputs::kLast) {
        if (start + length < n) continue;
        hidden = hidden.narrow(1, length - 1, 1);
        if (segment_keys.defined()) segment_keys = segment_keys.narrow(1, length - 1, 1);
      }
      // [1, S, d] -> [S, vocab]
      logprobs.push_back(torch::log_softmax(network_->Logits(hidden)[0], -1));
      if (segment_keys.defined()) keys.push_back(segment_keys[0]);
    }
    auto join = [](std::vector<torch::Tensor>& parts) {
      return (parts.size() == 1 ? parts[0] : torch::cat(parts, 0)).to(torch::kCPU, torch::kFloat32);
    };
    if (knn_lm_keys != nullptr) *knn_lm_keys = join(keys);
    return join(logprobs);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("model forward failed: ", e.what_without_backtrace()));
  }
}

absl::StatusOr<ExitForward> Model::ForwardWithExit(absl::Span<const int> tokens,
                                                   memory::SessionMemory& memory,
                                                   float threshold, ExitMeasure measure) {
  MNEMO_RETURN_IF_ERROR(CheckTokens(tokens));
  MNEMO_RETURN_IF_ERROR(CheckExitMeasure(measure));
  MNEMO_RETURN_IF_ERROR(CheckLength(memory.next_position(), static_cast<int64_t>(tokens.size())));
  try {
    c10::InferenceMode inference;
    const int64_t n = static_cast<int64_t>(tokens.size());
    torch::Tensor all = TokenTensor(tokens);  // [1, n]
    std::vector<torch::Tensor> logprobs, layers;
    for (int64_t start = 0; start < n; start += config_.seg_len) {
      const int64_t length = std::min<int64_t>(config_.seg_len, n - start);
      torch::Tensor exit_layers;  // [1, S]
      torch::Tensor hidden =
          network_->ForwardSegmentWithExit(all.narrow(1, start, length), memory, threshold,
                                           measure, exit_classifier(), &exit_layers);
      logprobs.push_back(torch::log_softmax(network_->Logits(hidden)[0], -1));
      layers.push_back(exit_layers[0]);
    }
    ExitForward out;
    out.logprobs = torch::cat(logprobs, 0).to(torch::kCPU, torch::kFloat32);
    torch::Tensor all_layers = torch::cat(layers, 0).to(torch::kCPU, torch::kInt64).contiguous();
    const int64_t* data = all_layers.data_ptr<int64_t>();
    out.exit_layers.assign(data, data + n);
    return out;
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("model forward failed: ", e.what_without_backtrace()));
  }
}

int64_t Model::ParameterCount() const { return network_->ParameterCount(); }

absl::Status Model::Save(const std::string& dir) const { return network_->Save(dir, config_); }

}  // namespace mnemo::model
