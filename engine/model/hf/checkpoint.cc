#include "engine/model/hf/checkpoint.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/util/files.h"
#include "engine/util/shape_string.h"

namespace mnemo::model::hf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Buffers transformers may save beside the weights; they carry no learned values.
bool Weightless(const std::string& name) {
  return absl::EndsWith(name, "rotary_emb.inv_freq") || absl::EndsWith(name, ".attn.bias") ||
         absl::EndsWith(name, ".attn.masked_bias");
}

}  // namespace

absl::StatusOr<std::vector<std::string>> WeightFiles(const std::string& dir) {
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::error_code error;
  if (fs::exists(single, error)) return std::vector<std::string>{single.string()};
  if (!fs::exists(index, error)) {
    return absl::NotFoundError(absl::StrCat("no weights in ", dir, ": neither ", single.string(),
                                            " nor ", index.string(), " exists"));
  }
  absl::StatusOr<std::string> text = util::ReadFile(index.string());
  if (!text.ok()) return text.status();
  json j;
  try {
    j = json::parse(*text);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(index.string(), ": not valid JSON: ", e.what()));
  }
  auto map = j.find("weight_map");
  if (map == j.end() || !map->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index.string(), ": field 'weight_map' must be an object"));
  }
  std::set<std::string> names;
  for (const auto& [tensor, file] : map->items()) {
    if (!file.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index.string(), ": weight_map['", tensor, "'] must be a file name"));
    }
    const std::string shard = file.get<std::string>();
    if (shard.find('/') != std::string::npos || shard.find("..") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(index.string(), ": weight_map['", tensor,
                                                     "'] names '", shard,
                                                     "', not a file of this folder"));
    }
    names.insert(shard);
  }
  std::vector<std::string> shards;
  for (const std::string& shard : names) shards.push_back((fs::path(dir) / shard).string());
  return shards;
}

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir) {
  std::unique_ptr<Checkpoint> checkpoint(new Checkpoint());
  absl::StatusOr<std::vector<std::string>> shards = WeightFiles(dir);
  if (!shards.ok()) return shards.status();
  for (const std::string& path : *shards) {
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
    if (!file.ok()) return file.status();
    for (const auto& [name, entry] : (*file)->entries()) {
      auto [it, inserted] = checkpoint->where_.emplace(name, file->get());
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", name, "' is in both ", it->second->path(), " and ", path));
      }
    }
    checkpoint->files_.push_back(*std::move(file));
  }
  return checkpoint;
}

absl::StatusOr<torch::Tensor> Checkpoint::Take(const std::string& name,
                                               std::vector<int64_t> shape) {
  auto it = where_.find(name);
  if (it == where_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "tensor '", name, "' is missing from the checkpoint (",
        files_.size() == 1 ? files_[0]->path() : absl::StrCat(files_.size(), " shards"), ")"));
  }
  const SafetensorsFile& file = *it->second;
  const SafetensorsFile::Entry& entry = file.entries().at(name);
  if (entry.shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.path(), ": tensor '", name, "' has shape ", util::ShapeString(entry.shape),
        ", config.json implies ", util::ShapeString(shape)));
  }
  if (entry.dtype_name != "F32" && entry.dtype_name != "F16" && entry.dtype_name != "BF16") {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": tensor '", name, "' has dtype ",
                                                   entry.dtype_name,
                                                   "; supported: F32, F16, BF16"));
  }
  absl::StatusOr<torch::Tensor> tensor = file.ReadFloat(name);
  if (!tensor.ok()) return tensor.status();
  if (!torch::isfinite(*tensor).all().item<bool>()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": tensor '", name, "' holds values that are not finite"));
  }
  taken_.insert(name);
  dtypes_.insert(entry.dtype_name);
  return tensor;
}

absl::Status Checkpoint::Finish() const {
  for (const auto& [name, file] : where_) {
    if (taken_.count(name) == 0 && !Weightless(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          file->path(), ": unexpected tensor '", name,
          "' (a variant of the architecture this server does not implement?)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace mnemo::model::hf
