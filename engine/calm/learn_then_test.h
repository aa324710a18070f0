// Learn then Test for CALM's exit threshold (docs/design.md §5): from measured candidates to the
// loosest threshold whose risk is certified <= δ with probability >= 1 − ε.
//
// Candidates are tested strict to loose (descending threshold) with Hoeffding–Bentkus
// p-values over the n calibration texts and fixed-sequence testing. Guarantee, if the
// calibration texts are i.i.d. draws from the distribution the model will serve:
// P(teacher-forced token-disagreement risk of the chosen λ > δ) <= ε (agreement.h defines the
// risk). Nothing accepted: the model stays uncalibrated (exit_threshold 1.0 = never exit).
// Pure function over measurements.
#ifndef MNEMO_ENGINE_CALM_LEARN_THEN_TEST_H_
#define MNEMO_ENGINE_CALM_LEARN_THEN_TEST_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "engine/calm/agreement.h"

namespace mnemo::calm {

// The threshold an uncalibrated model keeps (ModelConfig::exit_threshold's default).
inline constexpr float kNeverExitThreshold = 1.0f;

struct LttRow {
  float threshold = 0.0f;
  double risk = 0.0;             // mean per-text risk R̂
  double pooled_risk = 0.0;      // over all positions, for reference
  double mean_exit_layer = 0.0;  // 1-based
  double layers_saved = 0.0;     // 1 − mean_exit_layer / n_layers
  double p_value = 1.0;          // Hoeffding–Bentkus for H: risk > δ
  bool accepted = false;         // by fixed-sequence testing
};

struct LttResult {
  double delta = 0.0;
  double epsilon = 0.0;
  int64_t texts = 0;        // n
  std::vector<LttRow> rows; // strict to loose
  int chosen = -1;          // index into rows; -1 = nothing accepted

  bool calibrated() const { return chosen >= 0; }
  // The chosen λ, or kNeverExitThreshold.
  float threshold() const;
};

// `measurements` in any order (rows come out sorted strict to loose); every one must cover
// the same n texts. delta in (0, 1), epsilon in (0, 1).
LttResult LearnThenTest(absl::Span<const CandidateMeasurement> measurements, int n_layers,
                        double delta, double epsilon);

// Smallest number of texts for which any threshold can be accepted (a zero empirical risk):
// the least n with min(Hoeffding, Bentkus) p-value at R̂ = 0 <= ε.
int64_t MinimumTexts(double delta, double epsilon);

}  // namespace mnemo::calm

#endif  // MNEMO_ENGINE_CALM_LEARN_THEN_TEST_H_
