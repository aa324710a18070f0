#include "engine/model/host_confidence.h"

#include <cmath>
#include <limits>
#include <vector>

namespace mnemo::model {

bool SoftmaxResponseOnHost(const torch::Tensor& logits) {
  return logits.dim() >= 1 && logits.device().is_cpu() &&
         logits.scalar_type() == torch::kFloat32 && logits.size(-1) >= 2 &&
         !logits.requires_grad();
}

torch::Tensor SoftmaxResponse(const torch::Tensor& logits) {
  const int64_t classes = logits.size(-1);
  torch::Tensor rows = logits.reshape({-1, classes}).contiguous();
  const int64_t count = rows.size(0);
  std::vector<int64_t> shape(logits.sizes().begin(), logits.sizes().end() - 1);
  torch::Tensor out = torch::empty({count}, rows.options());
  const float* in = rows.data_ptr<float>();
  float* conf = out.data_ptr<float>();
  for (int64_t r = 0; r < count; ++r) {
    const float* l = in + r * classes;
    float first = -std::numeric_limits<float>::infinity(), second = first;
    for (int64_t j = 0; j < classes; ++j) {
      if (l[j] > first) {
        second = first;
        first = l[j];
      } else if (l[j] > second) {
        second = l[j];
      }
    }
    float total = 0.0f;
    for (int64_t j = 0; j < classes; ++j) total += std::exp(l[j] - first);
    conf[r] = (1.0f - std::exp(second - first)) / total;
  }
  return out.view(shape);
}

}  // namespace mnemo::model
