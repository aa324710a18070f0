// BuildDatastore: runs a model over corpus files and writes a kNN-LM datastore directory
// (docs/datastores.md). Each file is read like the Score RPC reads a text: a fresh memory, BOS
// first, then the bytes in segments; entry t has key = Forward's knn_lm_keys at position t and
// value = token t+1, so a file of n bytes gives n entries.
//
// Keys stream to keys.f16 and values to values.bin while the model runs; the index is then
// built from keys.f16 (the float16-rounded keys, so a flat index's distances are exactly those
// of the stored keys). Deterministic: the same model, files, options and thread count give
// byte-identical index.faiss, values.bin and keys.f16. Uses the model from the calling thread.
#ifndef MNEMO_ENGINE_DATASTORE_BUILDER_H_
#define MNEMO_ENGINE_DATASTORE_BUILDER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/datastore/corpus_files.h"
#include "engine/datastore/manifest.h"
#include "engine/datastore/model_id.h"
#include "engine/model/model.h"

namespace mnemo::datastore {

enum class IndexChoice { kAuto, kFlat, kIvfPq };

struct BuildOptions {
  IndexChoice index = IndexChoice::kAuto;
  int64_t flat_threshold = 100000;  // kAuto: IndexFlatL2 below this many entries, IVF-PQ above
  int nlist = 0;                    // 0 = 4 * sqrt(entries), at least 1
  int pq_m = 0;                     // 0 = d / 8 rounded down to a divisor of d
  int pq_nbits = 8;
  int64_t max_train = 65536;        // IVF-PQ training sample cap (sampled with `seed`)
  uint64_t seed = 1234;
  int chunk_tokens = 4096;          // tokens per Forward call
  std::string corpus_root;          // recorded in the manifest
};

struct BuildProgress {
  std::string stage;        // "keys", "train", "add", "write"
  int64_t bytes_done = 0;   // corpus bytes run through the model so far
  int64_t bytes_total = 0;
  int64_t entries = 0;      // entries written so far
  int file = 0;             // 1-based file being read
  int files = 0;
};

// Writes into `out_dir` (created; existing datastore files are overwritten — the caller
// decides whether that is allowed). Returns the manifest it wrote.
absl::StatusOr<Manifest> BuildDatastore(model::Model& model, const ModelId& model_id,
                                        const std::vector<SourceFile>& files,
                                        const std::string& out_dir, const BuildOptions& options,
                                        const std::function<void(const BuildProgress&)>& progress);

}  // namespace mnemo::datastore

#endif  // MNEMO_ENGINE_DATASTORE_BUILDER_H_
