#include "engine/calm/threshold_schedule.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mnemo::calm {

bool ExitEnabled(float threshold) { return threshold < 1.0f; }

float ScheduledThreshold(float lambda, int64_t t, int64_t max_new_tokens, float tau) {
  if (!ExitEnabled(lambda) || std::isnan(lambda)) return std::numeric_limits<float>::infinity();
  double fraction = 0.0;  // t / N
  if (max_new_tokens > 0) {
    fraction = static_cast<double>(std::clamp<int64_t>(t, 0, max_new_tokens)) /
               static_cast<double>(max_new_tokens);
  }
  const double value = 0.9 * lambda + 0.1 * std::exp(-static_cast<double>(tau) * fraction);
  return static_cast<float>(std::clamp(value, 0.0, 1.0));
}

}  // namespace mnemo::calm
