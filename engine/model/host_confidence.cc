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

bool ClassifierConfidenceOnHost(const torch::Tensor& hidden) {
  return hidden.dim() >= 1 && hidden.device().is_cpu() &&
         hidden.scalar_type() == torch::kFloat32 && hidden.size(-1) >= 1 &&
         !hidden.requires_grad() && !torch::GradMode::is_enabled();
}

torch::Tensor ClassifierConfidence(const torch::Tensor& hidden, const float* weight, float bias,
                                   float eps) {
  const int64_t d = hidden.size(-1);
  torch::Tensor rows = hidden.reshape({-1, d}).contiguous();
  const int64_t count = rows.size(0);
  std::vector<int64_t> shape(hidden.sizes().begin(), hidden.sizes().end() - 1);
  torch::Tensor out = torch::empty({count}, rows.options());
  const float* in = rows.data_ptr<float>();
  float* conf = out.data_ptr<float>();
  double weight_sum = 0.0;
  for (int64_t i = 0; i < d; ++i) weight_sum += weight[i];
  for (int64_t r = 0; r < count; ++r) {
    const float* h = in + r * d;
    double sum = 0.0, dot = 0.0;
    for (int64_t i = 0; i < d; ++i) {
      sum += h[i];
      dot += static_cast<double>(weight[i]) * h[i];
    }
    const double mean = sum / static_cast<double>(d);
    double squares = 0.0;
    for (int64_t i = 0; i < d; ++i) squares += (h[i] - mean) * (h[i] - mean);
    const double rstd = 1.0 / std::sqrt(squares / static_cast<double>(d) + eps);
    // w . ((h - mean) * rstd) + b
    const double logit = (dot - mean * weight_sum) * rstd + bias;
    conf[r] = static_cast<float>(1.0 / (1.0 + std::exp(-logit)));
  }
  return out.view(shape);
}

}  // namespace mnemo::model
