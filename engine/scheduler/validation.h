// Request validation, run synchronously on the caller's thread before anything is queued.
// Errors are INVALID_ARGUMENT naming the mnemo.v1 proto field at fault.
#ifndef MNEMO_ENGINE_SCHEDULER_VALIDATION_H_
#define MNEMO_ENGINE_SCHEDULER_VALIDATION_H_

#include "absl/status/status.h"
#include "engine/types.h"

namespace mnemo::scheduler {

struct RequestLimits {
  int default_max_new_tokens = 256;  // used when a request says 0
  int max_new_tokens_cap = 4096;
  int max_top_logprobs = 20;
};

// Checks `options` and resolves max_new_tokens == 0 to the default.
absl::Status ValidateGenerate(engine::GenerateOptions& options, const RequestLimits& limits);
absl::Status ValidateScore(const engine::ScoreOptions& options);
absl::Status ValidateAddToDatastore(const engine::AddToDatastoreOptions& options);

}  // namespace mnemo::scheduler

#endif  // MNEMO_ENGINE_SCHEDULER_VALIDATION_H_
