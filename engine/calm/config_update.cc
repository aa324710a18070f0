#include "engine/calm/config_update.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/model/model_config.h"
#include "engine/util/files.h"
#include "nlohmann/json.hpp"

namespace mnemo::calm {
namespace {

namespace fs = std::filesystem;

// Applies `edit` to MODEL_DIR/config.json's JSON and writes it back.
absl::Status EditConfig(const std::string& model_dir,
                        const std::function<void(nlohmann::json&)>& edit) {
  const std::string path = (fs::path(model_dir) / "config.json").string();
  absl::StatusOr<std::string> old_text = util::ReadFile(path);
  if (!old_text.ok()) return old_text.status();
  nlohmann::json json = nlohmann::json::parse(*old_text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a JSON object"));
  }
  edit(json);
  const std::string text = json.dump(2) + "\n";
  absl::StatusOr<model::ModelConfig> parsed = model::ParseModelConfig(text);
  if (!parsed.ok()) {
    return absl::Status(parsed.status().code(),
                        absl::StrCat("refusing to write ", path, ": ", parsed.status().message()));
  }
  const std::string temporary = path + ".calibrate.tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) return absl::DataLossError(absl::StrCat("cannot write ", temporary));
  }
  std::error_code error;
  fs::rename(temporary, path, error);
  if (error) {
    std::remove(temporary.c_str());
    return absl::InternalError(absl::StrCat("cannot replace ", path, ": ", error.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteExitThreshold(const std::string& model_dir, float threshold,
                                model::ExitMeasure measure) {
  const double value = std::stod(absl::StrFormat("%.6g", threshold));
  return EditConfig(model_dir, [&](nlohmann::json& json) {
    if (measure == model::ExitMeasure::kSoftmaxResponse) {
      json["exit_threshold"] = value;
    } else {
      json["exit_thresholds"][model::ExitMeasureName(measure)] = value;
    }
  });
}

absl::Status WriteDefaultExitMeasure(const std::string& model_dir, model::ExitMeasure measure) {
  return EditConfig(model_dir, [&](nlohmann::json& json) {
    if (measure == model::ExitMeasure::kSoftmaxResponse) {
      json.erase("exit_measure");
    } else {
      json["exit_measure"] = model::ExitMeasureName(measure);
    }
  });
}

}  // namespace mnemo::calm
