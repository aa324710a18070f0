// CheckIvfBlob: walks bytes laid out as IvfHeadIndex::Serialize writes them (FAISS 1.7.3's
// IndexIVFFlat over an IndexFlatIP quantizer, with array inverted lists) field by field, before
// faiss::read_index sees them. FAISS trusts the counts in a blob: it sizes vectors from them
// before reading (a crafted ImportSession could make the server allocate whatever a count says)
// and reads a sparse list table past its end. This accepts a blob only if every count fits in
// the bytes that follow it.
//
// Pure function; any thread.
#ifndef MNEMO_ENGINE_KNN_IVF_BLOB_CHECK_H_
#define MNEMO_ENGINE_KNN_IVF_BLOB_CHECK_H_

#include <string_view>

#include "absl/status/status.h"

namespace mnemo::knn {

// OK, or DATA_LOSS naming the first field that is not as Serialize writes it, or whose count
// the remaining bytes cannot hold, and its byte offset.
absl::Status CheckIvfBlob(std::string_view blob);

}  // namespace mnemo::knn

#endif  // MNEMO_ENGINE_KNN_IVF_BLOB_CHECK_H_
