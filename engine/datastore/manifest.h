// Manifest: DIR/manifest.json, the description of a datastore directory (docs/datastores.md).
//
//   index.faiss   FAISS index over the keys, L2 metric (IndexFlatL2 or IndexIVFPQ)
//   values.bin    int32 little-endian, [entries]: the next token of each entry
//   keys.f16      float16 little-endian, [entries, d]: the exact keys (distance recomputation)
//   manifest.json this struct
//
// Plain data; Open checks every file's size against it before trusting any byte.
#ifndef MNEMO_ENGINE_DATASTORE_MANIFEST_H_
#define MNEMO_ENGINE_DATASTORE_MANIFEST_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "engine/datastore/model_id.h"

namespace mnemo::datastore {

inline constexpr int kFormatVersion = 1;
inline constexpr char kKeyType[] = "last_layer_ffn_input_post_ln";
inline constexpr char kIndexFile[] = "index.faiss";
inline constexpr char kValuesFile[] = "values.bin";
inline constexpr char kKeysFile[] = "keys.f16";
inline constexpr char kManifestFile[] = "manifest.json";

enum class IndexType { kFlat, kIvfPq };
const char* IndexTypeName(IndexType type);  // "flat", "ivfpq"

struct Manifest {
  int format_version = kFormatVersion;
  ModelId model;
  std::string key_type = kKeyType;
  int d = 0;
  int64_t entries = 0;

  IndexType index_type = IndexType::kFlat;
  int nlist = 0;          // IVF lists (ivfpq only)
  int pq_m = 0;           // PQ sub-quantizers (ivfpq only)
  int pq_nbits = 0;       // bits per PQ code (ivfpq only)
  int64_t train_size = 0; // vectors the IVF-PQ was trained on (ivfpq only)
  uint64_t seed = 0;

  std::string corpus;     // the corpus directory
  int64_t corpus_files = 0;
  int64_t corpus_bytes = 0;

  int64_t index_bytes = 0;   // size of index.faiss
  int64_t values_bytes = 0;  // entries * 4
  int64_t keys_bytes = 0;    // entries * d * 2
  double build_seconds = 0;
  std::string built_at;      // UTC, ISO 8601
};

std::string ManifestToJson(const Manifest& manifest);
// INVALID_ARGUMENT naming the missing or ill-typed field; FAILED_PRECONDITION for an unknown
// format version or key type.
absl::StatusOr<Manifest> ParseManifest(const std::string& json_text);

}  // namespace mnemo::datastore

#endif  // MNEMO_ENGINE_DATASTORE_MANIFEST_H_
