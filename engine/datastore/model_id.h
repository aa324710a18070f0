// ModelId: which model a datastore's keys came from. Keys are hidden states, so a datastore is
// only meaningful for the exact weights that produced it; Datastore::Open compares ids.
//
// fingerprint = 16 hex digits of FNV-1a 64 over: config.json without its CALM calibration
// fields "exit_threshold", "exit_thresholds" and "exit_measure" (re-serialised with sorted keys
// and a 2-space indent, as the model writer does), then model.safetensors' size in bytes (8
// little-endian bytes), its first MiB and its last MiB. Reading 2 MiB keeps it cheap for large
// weights; a retrained or fine-tuned model changes both ends of the file (the safetensors header
// lists every tensor, the tail holds the last layers' values). Leaving those out lets
// mnemo-calibrate --write keep the model's datastores; the exit classifier is a file of its own
// (exit_classifier.safetensors) and is not hashed either.
#ifndef MNEMO_ENGINE_DATASTORE_MODEL_ID_H_
#define MNEMO_ENGINE_DATASTORE_MODEL_ID_H_

#include <string>

#include "absl/status/statusor.h"

namespace mnemo::datastore {

struct ModelId {
  std::string name;         // config.json "name"
  std::string fingerprint;  // 16 lowercase hex digits, see the file comment

  // "name@fingerprint", the form in manifests and error messages.
  std::string ToString() const { return name + "@" + fingerprint; }
  bool operator==(const ModelId& other) const {
    return name == other.name && fingerprint == other.fingerprint;
  }
};

// Reads DIR/config.json and DIR/model.safetensors; NOT_FOUND naming a missing file.
absl::StatusOr<ModelId> ComputeModelId(const std::string& model_dir);

}  // namespace mnemo::datastore

#endif  // MNEMO_ENGINE_DATASTORE_MODEL_ID_H_
