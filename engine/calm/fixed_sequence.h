// Fixed-sequence testing (Learn then Test's family-wise error control without a Bonferroni
// correction): hypotheses are tested in a fixed order, each at level ε, and testing stops at
// the first one not rejected.
//
// For CALM the order is candidate thresholds from strict (high) to loose (low): a threshold
// is accepted while its p-value is <= ε, and every threshold after the first failure is
// rejected even if its own p-value is small (its evidence was spent by the failure before
// it). The accepted set then has P(some accepted threshold has risk > δ) <= ε. Pure function.
#ifndef MNEMO_ENGINE_CALM_FIXED_SEQUENCE_H_
#define MNEMO_ENGINE_CALM_FIXED_SEQUENCE_H_

#include <vector>

#include "absl/types/span.h"

namespace mnemo::calm {

struct FixedSequenceResult {
  std::vector<bool> accepted;  // [candidates]; a prefix of trues, then falses
  int last_accepted = -1;      // index of the loosest accepted candidate; -1 = none
};

// `p_values` in testing order (strict to loose).
FixedSequenceResult FixedSequenceTest(absl::Span<const double> p_values, double epsilon);

}  // namespace mnemo::calm

#endif  // MNEMO_ENGINE_CALM_FIXED_SEQUENCE_H_
