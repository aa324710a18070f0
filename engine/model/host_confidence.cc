#include "engine/model/host_confidence.h"

#include <cmath>
#include <limits>
#include <vector>

namespace mnemo::model {
namespace {

// x [..., n] -> [...] float32: `value(row, n)` of each row of n floats.
template <typename Value>
torch::Tensor PerRow(const torch::Tensor& x, Value value) {
  const int64_t n = x.size(-1);
  torch::Tensor rows = x.reshape({-1, n}).contiguous();
  const int64_t count = rows.size(0);
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - 1);
  torch::Tensor out = torch::empty({count}, rows.options());
  const float* in = rows.data_ptr<float>();
  float* result = out.data_ptr<float>();
  for (int64_t r = 0; r < count; ++r) result[r] = value(in + r * n, n);
  return out.view(shape);
}

}  // namespace

bool SoftmaxResponseOnHost(const torch::Tensor& logits) {
  return logits.dim() >= 1 && logits.device().is_cpu() &&
         logits.scalar_type() == torch::kFloat32 && logits.size(-1) >= 2 &&
         !logits.requires_grad();
}

torch::Tensor SoftmaxResponse(const torch::Tensor& logits) {
  return PerRow(logits, [](const float* l, int64_t classes) {
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
    return (1.0f - std::exp(second - first)) / total;
  });
}

bool ClassifierConfidenceOnHost(const torch::Tensor& hidden) {
  return hidden.dim() >= 1 && hidden.device().is_cpu() &&
         hidden.scalar_type() == torch::kFloat32 && hidden.size(-1) >= 1 &&
         !hidden.requires_grad() && !torch::GradMode::is_enabled();
}

torch::Tensor ClassifierConfidence(const torch::Tensor& hidden, const float* weight, float bias,
                                   float eps) {
  const int64_t d = hidden.size(-1);
  double weight_sum = 0.0;
  for (int64_t i = 0; i < d; ++i) weight_sum += weight[i];
  return PerRow(hidden, [&](const float* h, int64_t n) {
    double sum = 0.0, dot = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      sum += h[i];
      dot += static_cast<double>(weight[i]) * h[i];
    }
    const double mean = sum / static_cast<double>(n);
    double squares = 0.0;
    for (int64_t i = 0; i < n; ++i) squares += (h[i] - mean) * (h[i] - mean);
    const double rstd = 1.0 / std::sqrt(squares / static_cast<double>(n) + eps);
    // w . ((h - mean) * rstd) + b
    const double logit = (dot - mean * weight_sum) * rstd + bias;
    return static_cast<float>(1.0 / (1.0 + std::exp(-logit)));
  });
}

}  // namespace mnemo::model
