#include "engine/datastore/manifest.h"

#include <nlohmann/json.hpp>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mnemo::datastore {
namespace {

using json = nlohmann::json;

template <typename T>
absl::Status Get(const json& j, const char* key, T& out) {
  auto it = j.find(key);
  if (it == j.end()) return absl::InvalidArgumentError(absl::StrCat("manifest: missing \"", key, "\""));
  try {
    out = it->get<T>();
  } catch (const json::exception&) {
    return absl::InvalidArgumentError(absl::StrCat("manifest: \"", key, "\" has the wrong type"));
  }
  return absl::OkStatus();
}

#define MANIFEST_GET(j, key, out)                          \
  do {                                                     \
    absl::Status s_ = Get(j, key, out);                    \
    if (!s_.ok()) return s_;                               \
  } while (0)

}  // namespace

const char* IndexTypeName(IndexType type) {
  return type == IndexType::kFlat ? "flat" : "ivfpq";
}

std::string ManifestToJson(const Manifest& m) {
  json index = {{"type", IndexTypeName(m.index_type)}, {"metric", "l2"}};
  if (m.index_type == IndexType::kIvfPq) {
    index["nlist"] = m.nlist;
    index["pq_m"] = m.pq_m;
    index["pq_nbits"] = m.pq_nbits;
    index["train_size"] = m.train_size;
  }
  index["seed"] = m.seed;
  json j = {
      {"format_version", m.format_version},
      {"model_id", m.model.ToString()},
      {"model", {{"name", m.model.name}, {"fingerprint", m.model.fingerprint}}},
      {"key_type", m.key_type},
      {"d", m.d},
      {"entries", m.entries},
      {"index", index},
      {"corpus", {{"path", m.corpus}, {"files", m.corpus_files}, {"bytes", m.corpus_bytes}}},
      {"files",
       {{kIndexFile, m.index_bytes}, {kValuesFile, m.values_bytes}, {kKeysFile, m.keys_bytes}}},
      {"bytes_per_entry",
       m.entries > 0 ? static_cast<double>(m.index_bytes + m.values_bytes + m.keys_bytes) /
                           static_cast<double>(m.entries)
                     : 0.0},
      {"build_seconds", m.build_seconds},
      {"built_at", m.built_at},
  };
  return j.dump(2) + "\n";
}

absl::StatusOr<Manifest> ParseManifest(const std::string& json_text) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("manifest: not a JSON object");
  }
  Manifest m;
  MANIFEST_GET(j, "format_version", m.format_version);
  if (m.format_version != kFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat("manifest: format_version ",
                                                      m.format_version, ", this build reads ",
                                                      kFormatVersion));
  }
  if (!j.contains("model") || !j["model"].is_object()) {
    return absl::InvalidArgumentError("manifest: missing \"model\"");
  }
  MANIFEST_GET(j["model"], "name", m.model.name);
  MANIFEST_GET(j["model"], "fingerprint", m.model.fingerprint);
  MANIFEST_GET(j, "key_type", m.key_type);
  if (m.key_type != kKeyType) {
    return absl::FailedPreconditionError(
        absl::StrCat("manifest: key_type \"", m.key_type, "\", expected \"", kKeyType, "\""));
  }
  MANIFEST_GET(j, "d", m.d);
  MANIFEST_GET(j, "entries", m.entries);
  if (m.d <= 0 || m.entries < 0) return absl::InvalidArgumentError("manifest: bad d or entries");
  if (!j.contains("index") || !j["index"].is_object()) {
    return absl::InvalidArgumentError("manifest: missing \"index\"");
  }
  const json& index = j["index"];
  std::string type;
  MANIFEST_GET(index, "type", type);
  if (type == "flat") {
    m.index_type = IndexType::kFlat;
  } else if (type == "ivfpq") {
    m.index_type = IndexType::kIvfPq;
    MANIFEST_GET(index, "nlist", m.nlist);
    MANIFEST_GET(index, "pq_m", m.pq_m);
    MANIFEST_GET(index, "pq_nbits", m.pq_nbits);
    MANIFEST_GET(index, "train_size", m.train_size);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("manifest: unknown index type \"", type, "\""));
  }
  MANIFEST_GET(index, "seed", m.seed);
  if (j.contains("corpus") && j["corpus"].is_object()) {
    MANIFEST_GET(j["corpus"], "path", m.corpus);
    MANIFEST_GET(j["corpus"], "files", m.corpus_files);
    MANIFEST_GET(j["corpus"], "bytes", m.corpus_bytes);
  }
  if (!j.contains("files") || !j["files"].is_object()) {
    return absl::InvalidArgumentError("manifest: missing \"files\"");
  }
  MANIFEST_GET(j["files"], kIndexFile, m.index_bytes);
  MANIFEST_GET(j["files"], kValuesFile, m.values_bytes);
  MANIFEST_GET(j["files"], kKeysFile, m.keys_bytes);
  if (j.contains("build_seconds")) MANIFEST_GET(j, "build_seconds", m.build_seconds);
  if (j.contains("built_at")) MANIFEST_GET(j, "built_at", m.built_at);
  return m;
}

}  // namespace mnemo::datastore
