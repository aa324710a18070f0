// L2Normalise: rows scaled to unit length, the one definition of the normalisation kNN keys and
// queries get (cosine similarity as an inner product). Here, below both of its users
// (engine/knn's clustered keys, engine/model's kNN layer).
#ifndef MNEMO_ENGINE_KNN_L2_NORMALISE_H_
#define MNEMO_ENGINE_KNN_L2_NORMALISE_H_

#include <torch/types.h>

namespace mnemo::knn {

// x / max(||x||_2, epsilon) along the last dimension: [..., d] -> [..., d]. Each caller keeps
// its own epsilon (the model's kNN layer 1e-6, clustered keys 1e-12): changing one would change
// its results.
inline torch::Tensor L2Normalise(const torch::Tensor& x, double epsilon) {
  return x / x.norm(2, -1, true).clamp_min(epsilon);
}

}  // namespace mnemo::knn

#endif  // MNEMO_ENGINE_KNN_L2_NORMALISE_H_
