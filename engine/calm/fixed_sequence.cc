#include "engine/calm/fixed_sequence.h"

namespace mnemo::calm {

FixedSequenceResult FixedSequenceTest(absl::Span<const double> p_values, double epsilon) {
  FixedSequenceResult result;
  result.accepted.assign(p_values.size(), false);
  for (size_t j = 0; j < p_values.size(); ++j) {
    if (!(p_values[j] <= epsilon)) break;  // a NaN p-value stops the sequence too
    result.accepted[j] = true;
    result.last_accepted = static_cast<int>(j);
  }
  return result;
}

}  // namespace mnemo::calm
