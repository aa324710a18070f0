// DatastoreCatalog: the shared kNN-LM datastores a server loaded (`--datastore NAME=DIR`), by
// name, each with the kNN-LM defaults requests fall back to (docs/design.md §4).
//
// Owns every Datastore. Immutable after Open, so it is shared read-only (std::shared_ptr<const>)
// by the engine facade (listing, validation on callers' threads) and the loop thread (search).
#ifndef MNEMO_ENGINE_DATASTORE_DATASTORE_CATALOG_H_
#define MNEMO_ENGINE_DATASTORE_DATASTORE_CATALOG_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/datastore/datastore.h"
#include "engine/datastore/model_id.h"

namespace mnemo::datastore {

// The name requests use for a session's private datastore; no shared datastore may take it.
inline constexpr char kSessionDatastoreName[] = "session";

// What a request gets for each knn_lm field it leaves unset.
struct KnnLmDefaults {
  float lambda = 0.25f;
  int k = 16;
  float temperature = 1.0f;
  int nprobe = 8;
};

// One `--datastore` flag value: NAME=DIR[,lambda=L][,k=K][,temperature=T][,nprobe=N].
struct DatastoreSpec {
  std::string name;
  std::string dir;
  KnnLmDefaults defaults;
};

// INVALID_ARGUMENT naming the flag and what is wrong (bad name, missing DIR, unknown key,
// value out of range).
absl::StatusOr<DatastoreSpec> ParseDatastoreSpec(absl::string_view flag_value);

// Names: 1-64 characters of [A-Za-z0-9_.-]; never kSessionDatastoreName.
absl::Status ValidateDatastoreName(absl::string_view name);

class DatastoreCatalog {
 public:
  struct Entry {
    std::string name;
    KnnLmDefaults defaults;
    std::unique_ptr<Datastore> store;
  };

  // Opens every datastore for `model` (a datastore built by another model is
  // FAILED_PRECONDITION naming both ids, see Datastore::Open). Errors name the flag value.
  // Duplicate names are INVALID_ARGUMENT.
  static absl::StatusOr<std::unique_ptr<DatastoreCatalog>> Open(
      const std::vector<DatastoreSpec>& specs, const ModelId& model);
  // An empty catalog (servers without --datastore, tests).
  static std::unique_ptr<DatastoreCatalog> Empty();

  // nullptr when no datastore has that name.
  const Entry* Find(absl::string_view name) const;
  // Sorted by name.
  const std::vector<Entry>& entries() const { return entries_; }
  // "a, b" (or "none"): for error messages.
  std::string Names() const;

 private:
  DatastoreCatalog() = default;
  std::vector<Entry> entries_;
};

}  // namespace mnemo::datastore

#endif  // MNEMO_ENGINE_DATASTORE_DATASTORE_CATALOG_H_
