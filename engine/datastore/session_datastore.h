// SessionDatastore: one session's private kNN-LM datastore, filled through the API
// (Datastores.AddToSessionDatastore) and searched exactly.
//
// Owns its keys ([entries, d] float32) and values ([entries] int32) in RAM, grown
// geometrically so an append costs amortised O(added * d). Search is a brute-force matrix
// product followed by exact re-scoring of the k hits, so it returns exactly what a flat index
// would. Lives inside a Session; only the engine's loop thread touches it (not thread-safe).
#ifndef MNEMO_ENGINE_DATASTORE_SESSION_DATASTORE_H_
#define MNEMO_ENGINE_DATASTORE_SESSION_DATASTORE_H_

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/util/binary_io.h"
#include "engine/datastore/neighbour_index.h"

namespace mnemo::datastore {

class SessionDatastore : public NeighbourIndex {
 public:
  // `max_entries` bounds what Append accepts (0 = unbounded).
  SessionDatastore(int d, int64_t max_entries);

  // keys: [n, d] float32 CPU, values: n tokens. RESOURCE_EXHAUSTED (nothing added) when the
  // store would pass max_entries; INVALID_ARGUMENT for mismatched shapes.
  absl::Status Append(const torch::Tensor& keys, const std::vector<int32_t>& values);

  absl::StatusOr<std::vector<std::vector<Hit>>> Search(
      const torch::Tensor& queries, const SearchOptions& options) const override;

  int d() const override { return d_; }
  int64_t entries() const override { return entries_; }
  int64_t bytes() const override;  // allocated capacity
  int64_t max_entries() const { return max_entries_; }

  std::unique_ptr<SessionDatastore> Clone() const;

  // Durable sessions (docs/durability.md): the live entries, and a datastore read back from
  // them (DATA_LOSS for damaged bytes) that searches exactly like this one.
  void WriteTo(util::BinaryWriter& out) const;
  static absl::StatusOr<std::unique_ptr<SessionDatastore>> ReadFrom(util::BinaryReader& in);

 private:
  void Reserve(int64_t entries);

  const int d_;
  const int64_t max_entries_;
  int64_t entries_ = 0;
  torch::Tensor keys_;          // [capacity, d] float32; rows [0, entries_) are live
  torch::Tensor norms_;         // [capacity] float32: squared norm of each key
  std::vector<int32_t> values_;  // [entries_]
};

}  // namespace mnemo::datastore

#endif  // MNEMO_ENGINE_DATASTORE_SESSION_DATASTORE_H_
