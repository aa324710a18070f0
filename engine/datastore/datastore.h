// Datastore: one kNN-LM datastore directory opened read-only (docs/design.md §4,
// docs/datastores.md).
//
// Owns the FAISS index (IVF lists memory-mapped with IO_FLAG_MMAP; a flat index is read into
// RAM) and read-only mappings of values.bin and keys.f16. Immutable after Open: Search and the
// accessors are const and safe to call from any number of threads at once, so one Datastore is
// shared by every session that attaches it.
#ifndef MNEMO_ENGINE_DATASTORE_DATASTORE_H_
#define MNEMO_ENGINE_DATASTORE_DATASTORE_H_

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/datastore/manifest.h"
#include "engine/datastore/mapped_file.h"
#include "engine/datastore/model_id.h"
#include "engine/datastore/neighbour_index.h"

namespace faiss {
struct Index;
}

namespace mnemo::datastore {

// Hit ids are rows of keys.f16 / values.bin.
class Datastore : public NeighbourIndex {
 public:
  // Reads DIR/manifest.json, refuses a datastore whose model is not `model` (FAILED_PRECONDITION
  // naming both ids), checks every file's size against the manifest (DATA_LOSS on mismatch,
  // NOT_FOUND for a missing file) and maps the files.
  static absl::StatusOr<std::unique_ptr<Datastore>> Open(const std::string& dir,
                                                         const ModelId& model);
  ~Datastore() override;

  const Manifest& manifest() const { return manifest_; }
  const std::string& dir() const { return dir_; }
  int d() const override { return manifest_.d; }
  int64_t entries() const override { return manifest_.entries; }
  // index.faiss + values.bin + keys.f16 (mapped or read; the page cache decides what is resident).
  int64_t bytes() const override {
    return manifest_.index_bytes + manifest_.values_bytes + manifest_.keys_bytes;
  }
  // True when the IVF lists are memory-mapped from index.faiss (FAISS OnDiskInvertedLists)
  // rather than read into RAM; always false for a flat index.
  bool lists_mapped() const { return lists_mapped_; }

  // queries: [Q, d] float32 CPU. Returns Q lists of min(k, entries) hits sorted by exact
  // distance (recomputed from keys.f16, so approximate index distances never leak out).
  // INVALID_ARGUMENT for a bad shape or k < 1.
  absl::StatusOr<std::vector<std::vector<Hit>>> Search(
      const torch::Tensor& queries, const SearchOptions& options) const override;

  // Exact key of entry `id` as float32 [d] (tests, reranking).
  std::vector<float> Key(int64_t id) const;
  int32_t Value(int64_t id) const;

 private:
  Datastore() = default;

  std::string dir_;
  Manifest manifest_;
  std::unique_ptr<faiss::Index> index_;
  bool lists_mapped_ = false;
  std::unique_ptr<MappedFile> values_;  // int32 [entries]
  std::unique_ptr<MappedFile> keys_;    // float16 [entries, d]
};

// Exact squared L2 between float32 `query` [d] and float16 `key` [d] (raw IEEE half bits).
float SquaredL2ToHalf(const float* query, const uint16_t* key, int d);

}  // namespace mnemo::datastore

#endif  // MNEMO_ENGINE_DATASTORE_DATASTORE_H_
