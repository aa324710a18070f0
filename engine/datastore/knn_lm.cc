#include "engine/datastore/knn_lm.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mnemo::datastore {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// log(exp(a) + exp(b)) without NaN when either side is -inf.
double LogAddExp(double a, double b) {
  if (a == kNegInf) return b;
  if (b == kNegInf) return a;
  const double m = std::max(a, b);
  return m + std::log1p(std::exp(-std::abs(a - b)));
}

}  // namespace

absl::StatusOr<torch::Tensor> KnnLmLogProbs(const torch::Tensor& lm_logprobs,
                                            const std::vector<std::vector<Hit>>& hits,
                                            const KnnLmOptions& options) {
  if (lm_logprobs.dim() != 2) return absl::InvalidArgumentError("knn-lm: logprobs must be [Q, V]");
  const int64_t rows = lm_logprobs.size(0);
  const int64_t vocab = lm_logprobs.size(1);
  if (static_cast<int64_t>(hits.size()) != rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("knn-lm: ", hits.size(), " hit lists for ", rows, " rows"));
  }
  if (!(options.lambda >= 0.0f && options.lambda <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("knn-lm: lambda ", options.lambda,
                                                   " is outside [0, 1]"));
  }
  if (!(options.temperature > 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("knn-lm: temperature ", options.temperature,
                                                   " must be > 0"));
  }
  torch::Tensor out = lm_logprobs.to(torch::kCPU, torch::kFloat32).contiguous().clone();
  if (options.lambda == 0.0f) return out;

  const double log_lambda = std::log(static_cast<double>(options.lambda));
  const double log_rest = options.lambda == 1.0f ? kNegInf : std::log1p(-double{options.lambda});
  float* data = out.data_ptr<float>();
  std::vector<double> knn(static_cast<size_t>(vocab));
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<Hit>& row_hits = hits[static_cast<size_t>(r)];
    if (row_hits.empty()) continue;
    // Normaliser over all hits, then per-token sums, all as log-sum-exp of -d/T.
    double norm = kNegInf;
    std::fill(knn.begin(), knn.end(), kNegInf);
    for (const Hit& hit : row_hits) {
      if (hit.value < 0 || hit.value >= vocab) {
        return absl::InvalidArgumentError(
            absl::StrCat("knn-lm: hit value ", hit.value, " outside the vocabulary of ", vocab));
      }
      const double logit = -static_cast<double>(hit.distance) / options.temperature;
      norm = LogAddExp(norm, logit);
      knn[static_cast<size_t>(hit.value)] = LogAddExp(knn[static_cast<size_t>(hit.value)], logit);
    }
    if (norm == kNegInf) continue;  // every hit infinitely far: no kNN distribution
    float* row = data + r * vocab;
    for (int64_t y = 0; y < vocab; ++y) {
      const double log_knn = knn[static_cast<size_t>(y)] == kNegInf
                                 ? kNegInf
                                 : knn[static_cast<size_t>(y)] - norm;
      const double lm = row[y];
      const double a = log_knn == kNegInf ? kNegInf : log_lambda + log_knn;
      const double b = (log_rest == kNegInf || lm == kNegInf) ? kNegInf : log_rest + lm;
      row[y] = static_cast<float>(LogAddExp(a, b));
    }
  }
  return out;
}

}  // namespace mnemo::datastore
