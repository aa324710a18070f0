// kNN-LM interpolation (Khandelwal et al. 2020; docs/design.md §4), in log space:
//   log p(y) = logsumexp(log λ + log p_kNN(y), log(1-λ) + log p_LM(y))
//   p_kNN(y) ∝ Σ_{hits i with value y} exp(-d_i / T)
// Pure function; thread-safe.
#ifndef MNEMO_ENGINE_DATASTORE_KNN_LM_H_
#define MNEMO_ENGINE_DATASTORE_KNN_LM_H_

#include <torch/types.h>

#include <vector>

#include "absl/status/statusor.h"
#include "engine/datastore/datastore.h"

namespace mnemo::datastore {

struct KnnLmOptions {
  float lambda = 0.25f;      // weight of p_kNN, in [0, 1]
  float temperature = 1.0f;  // T > 0, in squared-L2 units
};

// lm_logprobs: [Q, V] float32 log-probabilities; hits: Q lists (one per row). Returns [Q, V]
// float32. A token without hits has p_kNN = 0 (-inf in its branch), so with λ = 1 it gets
// -inf; λ = 0 returns lm_logprobs exactly; a row with no hits at all keeps the LM's
// distribution (there is no kNN distribution to mix in). Never produces NaN.
// INVALID_ARGUMENT for λ outside [0, 1], T <= 0, mismatched row counts or a value >= V.
absl::StatusOr<torch::Tensor> KnnLmLogProbs(const torch::Tensor& lm_logprobs,
                                            const std::vector<std::vector<Hit>>& hits,
                                            const KnnLmOptions& options);

}  // namespace mnemo::datastore

#endif  // MNEMO_ENGINE_DATASTORE_KNN_LM_H_
