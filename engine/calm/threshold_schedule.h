// The CALM exit-threshold schedule (docs/design.md §5): a calibrated threshold λ relaxes as a
// generation proceeds, λ_t = clip(0.9·λ + 0.1·exp(−τ·t/N)) to [0, 1].
//
// Pure functions; the scheduler calls ScheduledThreshold once per decode step and row.
#ifndef MNEMO_ENGINE_CALM_THRESHOLD_SCHEDULE_H_
#define MNEMO_ENGINE_CALM_THRESHOLD_SCHEDULE_H_

#include <cstdint>

namespace mnemo::calm {

// Default decay rate of the schedule (CALM's τ).
inline constexpr float kDefaultScheduleTau = 4.0f;

// True when `threshold` allows early exits at all. ModelConfig::exit_threshold is 1.0 for an
// uncalibrated model: a softmax response p1 − p2 never exceeds 1, and 1.0 (with anything above
// it) is read as "never exit" rather than "exit only on saturated confidence".
bool ExitEnabled(float threshold);

// λ_t for output token `t` (0-based) of a request allowed `max_new_tokens` (N) tokens:
// clip(0.9·λ + 0.1·exp(−τ·t/N), 0, 1). t is clamped to [0, N]; N <= 0 reads as t/N = 0.
// A disabled λ (see ExitEnabled) stays disabled: the result is +infinity, so the exit test
// `confidence >= λ_t` can never pass. Early tokens get a stricter threshold than λ, late ones
// a looser one: λ_t < λ once exp(−τ·t/N) < λ.
float ScheduledThreshold(float lambda, int64_t t, int64_t max_new_tokens,
                         float tau = kDefaultScheduleTau);

}  // namespace mnemo::calm

#endif  // MNEMO_ENGINE_CALM_THRESHOLD_SCHEDULE_H_
