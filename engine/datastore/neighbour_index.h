// NeighbourIndex: what a kNN-LM step needs from a datastore: the k nearest stored keys of each
// query, by exact squared L2, with the token that followed each key.
//
// Implemented by Datastore (shared, on disk, memory-mapped, immutable) and SessionDatastore
// (one session's private, in-memory, growing store). Search is const; whether it may be
// called concurrently is the implementation's contract (Datastore: any thread;
// SessionDatastore: its owner's thread only).
#ifndef MNEMO_ENGINE_DATASTORE_NEIGHBOUR_INDEX_H_
#define MNEMO_ENGINE_DATASTORE_NEIGHBOUR_INDEX_H_

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace mnemo::datastore {

// One neighbour of a query.
struct Hit {
  int64_t id = -1;       // entry number
  float distance = 0;    // exact squared L2 between the query and the stored key
  int32_t value = -1;    // the token that followed the key
};

struct SearchOptions {
  int k = 16;
  int nprobe = 8;  // IVF lists visited (approximate indexes only)
};

class NeighbourIndex {
 public:
  virtual ~NeighbourIndex() = default;

  // queries: [Q, d] float32 CPU. Returns Q lists of min(k, entries()) hits sorted by exact
  // distance (ties by id). INVALID_ARGUMENT for a bad shape or k < 1.
  virtual absl::StatusOr<std::vector<std::vector<Hit>>> Search(
      const torch::Tensor& queries, const SearchOptions& options) const = 0;

  virtual int d() const = 0;
  virtual int64_t entries() const = 0;
  // Bytes the store occupies (files for a mapped datastore, RAM for an in-memory one).
  virtual int64_t bytes() const = 0;
};

}  // namespace mnemo::datastore

#endif  // MNEMO_ENGINE_DATASTORE_NEIGHBOUR_INDEX_H_
