// Valid p-values for "the expected risk exceeds δ" from an empirical mean risk (Learn then
// Test, Angelopoulos, Bates, Candès, Jordan & Lei 2021; used by CALM, Schuster et al. 2022).
//
// The null hypothesis for one candidate threshold is H: E[loss] > δ, losses in [0, 1] and
// i.i.d. over n calibration samples (here: texts). A small p-value is evidence that the risk
// is at most δ. Pure functions, thread-safe.
#ifndef MNEMO_ENGINE_CALM_P_VALUES_H_
#define MNEMO_ENGINE_CALM_P_VALUES_H_

#include <cstdint>

namespace mnemo::calm {

// h1(a, b) = a·ln(a/b) + (1−a)·ln((1−a)/(1−b)), the Bernoulli KL divergence (0·ln 0 = 0).
// a in [0, 1], b in (0, 1).
double BernoulliKl(double a, double b);

// P(Binom(n, p) <= k), summed in log space (exact to double rounding for any n).
double BinomialCdf(int64_t k, int64_t n, double p);

// Hoeffding: exp(−n·h1(min(R̂, δ), δ)).
double HoeffdingPValue(double risk, int64_t n, double delta);

// Bentkus: e·P(Binom(n, δ) <= ⌈n·R̂⌉), capped at 1. n·R̂ is rounded up after removing float
// noise (n·R̂ within 1e-9 of an integer counts as that integer).
double BentkusPValue(double risk, int64_t n, double delta);

// Hoeffding–Bentkus: min(Hoeffding, Bentkus), in [0, 1]. `risk` is the mean of n losses in
// [0, 1], delta in (0, 1), n >= 1. Non-decreasing in `risk`. It is 1 whenever risk >= delta:
// Hoeffding's term is then 1 and Bentkus's at least e/2, since ⌈n·δ⌉ is at least the
// binomial's median.
double HoeffdingBentkusPValue(double risk, int64_t n, double delta);

}  // namespace mnemo::calm

#endif  // MNEMO_ENGINE_CALM_P_VALUES_H_
