#include "engine/calm/learn_then_test.h"

#include <algorithm>

#include "engine/calm/fixed_sequence.h"
#include "engine/calm/p_values.h"

namespace mnemo::calm {

float LttResult::threshold() const {
  return calibrated() ? rows[static_cast<size_t>(chosen)].threshold : kNeverExitThreshold;
}

LttResult LearnThenTest(absl::Span<const CandidateMeasurement> measurements, int n_layers,
                        double delta, double epsilon) {
  LttResult result;
  result.delta = delta;
  result.epsilon = epsilon;
  result.texts = measurements.empty() ? 0 : static_cast<int64_t>(measurements[0].texts.size());
  for (const CandidateMeasurement& m : measurements) {
    LttRow row;
    row.threshold = m.threshold;
    row.risk = m.MeanRisk();
    row.pooled_risk = m.PooledRisk();
    row.mean_exit_layer = m.MeanExitLayer();
    row.layers_saved = n_layers > 0 ? 1.0 - row.mean_exit_layer / n_layers : 0.0;
    const int64_t n = static_cast<int64_t>(m.texts.size());
    row.p_value = n > 0 ? HoeffdingBentkusPValue(row.risk, n, delta) : 1.0;
    result.rows.push_back(row);
  }
  std::stable_sort(result.rows.begin(), result.rows.end(),
                   [](const LttRow& a, const LttRow& b) { return a.threshold > b.threshold; });
  std::vector<double> p_values;
  for (const LttRow& row : result.rows) p_values.push_back(row.p_value);
  const FixedSequenceResult fst = FixedSequenceTest(p_values, epsilon);
  for (size_t j = 0; j < result.rows.size(); ++j) result.rows[j].accepted = fst.accepted[j];
  result.chosen = fst.last_accepted;
  return result;
}

int64_t MinimumTexts(double delta, double epsilon) {
  for (int64_t n = 1; n <= 1000000; ++n) {
    if (HoeffdingBentkusPValue(0.0, n, delta) <= epsilon) return n;
  }
  return -1;
}

}  // namespace mnemo::calm
