#include "engine/knn/clustered_keys.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "engine/knn/l2_normalise.h"

namespace mnemo::knn {
namespace {

torch::Tensor Normalise(const torch::Tensor& x) { return L2Normalise(x, /*epsilon=*/1e-12); }

}  // namespace

ClusteredKeys::ClusteredKeys(int64_t centres, int64_t dim, double noise, uint64_t seed)
    : dim_(dim), noise_(noise), generator_(at::detail::createCPUGenerator(seed)) {
  if (centres > 0) {
    centres_ = Normalise(torch::randn({centres, dim}, generator_, torch::kFloat32));
  }
}

torch::Tensor ClusteredKeys::Sample(int64_t n) {
  torch::Tensor noise = torch::randn({n, dim_}, generator_, torch::kFloat32);
  if (!centres_.defined()) return Normalise(noise);
  torch::Tensor pick = torch::randint(centres_.size(0), {n}, generator_, torch::kInt64);
  return Normalise(centres_.index_select(0, pick) + noise * (noise_ / std::sqrt(double(dim_))));
}

torch::Tensor ClusteredKeys::SampleHeads(int64_t rows, int64_t heads) {
  return Sample(rows * heads).view({rows, heads, dim_});
}

}  // namespace mnemo::knn
