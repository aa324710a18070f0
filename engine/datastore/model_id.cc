#include "engine/datastore/model_id.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/model/hf/checkpoint.h"
#include "engine/model/model.h"
#include "engine/model/model_config.h"
#include "engine/util/files.h"
#include "engine/util/status_macros.h"

namespace mnemo::datastore {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kEndBytes = int64_t{1} << 20;

class Fnv1a64 {
 public:
  void Add(const char* data, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      hash_ ^= static_cast<unsigned char>(data[i]);
      hash_ *= 0x100000001b3ULL;
    }
  }
  uint64_t hash() const { return hash_; }

 private:
  uint64_t hash_ = 0xcbf29ce484222325ULL;
};

absl::Status AddRange(std::ifstream& in, int64_t offset, int64_t n, const std::string& path,
                      Fnv1a64& hash) {
  std::vector<char> buffer(static_cast<size_t>(n));
  in.seekg(offset);
  in.read(buffer.data(), n);
  if (in.gcount() != n) return absl::DataLossError(absl::StrCat("short read of ", path));
  hash.Add(buffer.data(), buffer.size());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelId> ComputeModelId(const std::string& model_dir) {
  const std::string config_path = (fs::path(model_dir) / "config.json").string();
  MNEMO_ASSIGN_OR_RETURN(std::string config_text, util::ReadFile(config_path));
  MNEMO_ASSIGN_OR_RETURN(model::ModelConfig config, model::LoadModelConfig(model_dir));
  // model.safetensors, or a Hugging Face folder's shards in name order.
  MNEMO_ASSIGN_OR_RETURN(std::vector<std::string> weight_files, model::hf::WeightFiles(model_dir));

  // The calibrated CALM thresholds and default exit measure (mnemo-calibrate --write) change
  // no weight and no hidden state, so they must not orphan the model's datastores: they are
  // left out of the fingerprint (and a config without them hashes as it always did).
  // The rest is hashed as the model writer formats it (sorted keys, 2-space indent), which
  // for a config.json written by mnemo is its bytes exactly.
  nlohmann::json json = nlohmann::json::parse(config_text, nullptr, /*allow_exceptions=*/false);
  if (json.is_object()) {
    json.erase("exit_threshold");
    json.erase("exit_thresholds");
    json.erase("exit_measure");
    config_text = json.dump(2) + "\n";
  }
  Fnv1a64 hash;
  hash.Add(config_text.data(), config_text.size());
  // Each weight file's size, first and last MiB (one file: as it always was).
  for (const std::string& weights_path : weight_files) {
    std::error_code error;
    const auto size = fs::file_size(weights_path, error);
    if (error) return absl::NotFoundError(absl::StrCat("cannot stat ", weights_path));
    std::ifstream weights(weights_path, std::ios::binary);
    if (!weights) return absl::NotFoundError(absl::StrCat("cannot open ", weights_path));
    const int64_t bytes = static_cast<int64_t>(size);
    char size_bytes[8];
    for (int i = 0; i < 8; ++i) size_bytes[i] = static_cast<char>((bytes >> (8 * i)) & 0xff);
    hash.Add(size_bytes, 8);
    const int64_t head = std::min(bytes, kEndBytes);
    MNEMO_RETURN_IF_ERROR(AddRange(weights, 0, head, weights_path, hash));
    const int64_t tail = std::min(bytes, kEndBytes);
    MNEMO_RETURN_IF_ERROR(AddRange(weights, bytes - tail, tail, weights_path, hash));
  }
  return ModelId{config.name, absl::StrFormat("%016x", hash.hash())};
}

}  // namespace mnemo::datastore
