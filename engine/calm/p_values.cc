#include "engine/calm/p_values.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mnemo::calm {
namespace {

// x·ln(x/y) with 0·ln 0 = 0.
double XLogXOverY(double x, double y) { return x > 0.0 ? x * std::log(x / y) : 0.0; }

}  // namespace

double BernoulliKl(double a, double b) {
  return XLogXOverY(a, b) + XLogXOverY(1.0 - a, 1.0 - b);
}

double BinomialCdf(int64_t k, int64_t n, double p) {
  if (k < 0) return 0.0;
  if (k >= n) return 1.0;
  if (p <= 0.0) return 1.0;
  if (p >= 1.0) return 0.0;
  // log C(n, i) + i ln p + (n − i) ln(1 − p), summed with the largest term factored out.
  const double log_p = std::log(p), log_q = std::log1p(-p);
  const double log_n_fact = std::lgamma(static_cast<double>(n) + 1.0);
  double max_term = -INFINITY;
  std::vector<double> terms;
  terms.reserve(static_cast<size_t>(k) + 1);
  for (int64_t i = 0; i <= k; ++i) {
    const double di = static_cast<double>(i);
    const double term = log_n_fact - std::lgamma(di + 1.0) -
                        std::lgamma(static_cast<double>(n - i) + 1.0) + di * log_p +
                        static_cast<double>(n - i) * log_q;
    terms.push_back(term);
    max_term = std::max(max_term, term);
  }
  double sum = 0.0;
  for (double term : terms) sum += std::exp(term - max_term);
  return std::min(1.0, std::exp(max_term) * sum);
}

double HoeffdingPValue(double risk, int64_t n, double delta) {
  return std::exp(-static_cast<double>(n) * BernoulliKl(std::min(risk, delta), delta));
}

double BentkusPValue(double risk, int64_t n, double delta) {
  const double count = static_cast<double>(n) * risk;
  const int64_t k = static_cast<int64_t>(std::ceil(count - 1e-9));
  return std::min(1.0, std::exp(1.0) * BinomialCdf(k, n, delta));
}

double HoeffdingBentkusPValue(double risk, int64_t n, double delta) {
  return std::min({1.0, HoeffdingPValue(risk, n, delta), BentkusPValue(risk, n, delta)});
}

}  // namespace mnemo::calm
