// MappedFile: a whole file mapped read-only (PROT_READ, MAP_SHARED). The pages are shared by
// every process and session that maps the same file; the OS pages them in on demand.
// Immutable after Open, so concurrent reads are safe.
#ifndef MNEMO_ENGINE_DATASTORE_MAPPED_FILE_H_
#define MNEMO_ENGINE_DATASTORE_MAPPED_FILE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace mnemo::datastore {

class MappedFile {
 public:
  // NOT_FOUND if missing; DATA_LOSS if its size is not `expected_bytes` (when >= 0).
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path,
                                                          int64_t expected_bytes);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const void* data() const { return data_; }
  int64_t size() const { return size_; }

 private:
  MappedFile(const void* data, int64_t size) : data_(data), size_(size) {}
  const void* const data_;  // nullptr for an empty file
  const int64_t size_;
};

}  // namespace mnemo::datastore

#endif  // MNEMO_ENGINE_DATASTORE_MAPPED_FILE_H_
