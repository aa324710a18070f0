// ClusteredKeys: synthetic unit vectors for kNN memory tests and benchmarks.
//
// A mixture of Gaussian clusters on the unit sphere: centre c (random unit vector) plus
// isotropic noise of total norm ~`noise`, normalised. Clustered rather than uniform because
// attention keys are: uniform random vectors in 64 dimensions are all nearly equidistant, so
// any approximate index has poor recall on them and a recall number would say nothing about
// real keys. `centres = 0` gives uniform vectors, the worst case.
//
// Plain data with a seeded generator; not thread-safe.
#ifndef MNEMO_ENGINE_KNN_CLUSTERED_KEYS_H_
#define MNEMO_ENGINE_KNN_CLUSTERED_KEYS_H_

#include <ATen/core/Generator.h>
#include <torch/types.h>

#include <cstdint>

namespace mnemo::knn {

class ClusteredKeys {
 public:
  ClusteredKeys(int64_t centres, int64_t dim, double noise, uint64_t seed);

  // [n, dim] float32 unit vectors, each drawn from a uniformly chosen centre.
  torch::Tensor Sample(int64_t n);
  // [rows, heads, dim]: independent draws (one mixture shared by all heads).
  torch::Tensor SampleHeads(int64_t rows, int64_t heads);

 private:
  torch::Tensor centres_;  // [centres, dim] unit vectors; undefined when uniform
  int64_t dim_;
  double noise_;
  at::Generator generator_;
};

}  // namespace mnemo::knn

#endif  // MNEMO_ENGINE_KNN_CLUSTERED_KEYS_H_
