#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

namespace mnemo::sampling {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Orders candidate ids by value descending, then id ascending.
struct ByValueDesc {
  absl::Span<const float> values;
  bool operator()(int a, int b) const {
    if (values[a] != values[b]) return values[a] > values[b];
    return a < b;
  }
};

}  // namespace

double UniformDouble(Rng& rng) {
  return static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);  // 2^-53
}

void ApplyRepetitionPenalty(absl::Span<float> logits, absl::Span<const int> previous,
                            float penalty) {
  if (penalty == 1.0f) return;
  absl::flat_hash_set<int> seen;
  for (int id : previous) {
    if (id < 0 || static_cast<size_t>(id) >= logits.size()) continue;
    if (!seen.insert(id).second) continue;  // each distinct id once
    float& v = logits[id];
    v = v > 0 ? v / penalty : v * penalty;
  }
}

void ApplyPresenceFrequencyPenalties(absl::Span<float> logits, absl::Span<const int> previous,
                                     float presence, float frequency) {
  if (presence == 0.0f && frequency == 0.0f) return;
  absl::flat_hash_map<int, int> counts;
  for (int id : previous) {
    if (id >= 0 && static_cast<size_t>(id) < logits.size()) ++counts[id];
  }
  for (const auto& [id, count] : counts) {
    logits[id] -= presence + frequency * static_cast<float>(count);
  }
}

void ApplyLogitBias(absl::Span<float> logits, absl::Span<const std::pair<int, float>> bias) {
  for (const auto& [id, value] : bias) {
    if (id >= 0 && static_cast<size_t>(id) < logits.size()) logits[id] += value;
  }
}

void MaskIds(absl::Span<float> logits, absl::Span<const int> ids) {
  for (int id : ids) {
    if (id >= 0 && static_cast<size_t>(id) < logits.size()) logits[id] = kNegInf;
  }
}

int Argmax(absl::Span<const float> logits) {
  int best = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float v = logits[i];
    if (std::isnan(v) || v == kNegInf) continue;
    if (best < 0 || v > logits[best]) best = static_cast<int>(i);
  }
  return best;
}

std::vector<int> SortedCandidates(absl::Span<const float> logits, int k) {
  std::vector<int> ids;
  ids.reserve(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!std::isnan(logits[i]) && logits[i] != kNegInf) ids.push_back(static_cast<int>(i));
  }
  ByValueDesc order{logits};
  if (k > 0 && static_cast<size_t>(k) < ids.size()) {
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), order);
    ids.resize(k);
  } else {
    std::sort(ids.begin(), ids.end(), order);
  }
  return ids;
}

size_t NucleusSize(absl::Span<const double> probs, float top_p) {
  if (probs.empty()) return 0;
  if (top_p >= 1.0f) return probs.size();
  double mass = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    mass += probs[i];
    // A tolerance above float rounding so that e.g. 0.5 + 0.3 >= 0.8f (0.800000012).
    if (mass >= static_cast<double>(top_p) - 1e-6) return i + 1;
  }
  return probs.size();
}

size_t MinPSize(absl::Span<const double> probs, float min_p) {
  if (min_p <= 0.0f) return probs.size();
  const double threshold = static_cast<double>(min_p) * (probs.empty() ? 0.0 : probs[0]);
  size_t keep = 0;
  while (keep < probs.size() && probs[keep] >= threshold) ++keep;
  return keep;
}

std::vector<Alternative> TopAlternatives(absl::Span<const float> logprobs, int n,
                                         absl::Span<const int> forbidden) {
  if (n <= 0) return {};
  std::vector<float> values(logprobs.begin(), logprobs.end());
  MaskIds(absl::MakeSpan(values), forbidden);
  std::vector<Alternative> out;
  for (int id : SortedCandidates(values, n)) out.push_back({id, logprobs[id]});
  return out;
}

SampleResult Sample(absl::Span<const float> logprobs, const SamplingParams& params,
                    absl::Span<const int> previous, absl::Span<const int> forbidden, Rng& rng) {
  std::vector<float> work(logprobs.begin(), logprobs.end());  // [vocab]
  ApplyRepetitionPenalty(absl::MakeSpan(work), previous, params.repetition_penalty);
  ApplyPresenceFrequencyPenalties(absl::MakeSpan(work), previous, params.presence_penalty,
                                  params.frequency_penalty);
  ApplyLogitBias(absl::MakeSpan(work), params.logit_bias);
  MaskIds(absl::MakeSpan(work), forbidden);

  SampleResult result;
  result.top = TopAlternatives(logprobs, params.top_logprobs, forbidden);
  if (params.temperature <= 0.0f) {
    result.id = Argmax(work);
  } else {
    for (float& v : work) v /= params.temperature;
    std::vector<int> candidates = SortedCandidates(work, params.top_k);
    if (!candidates.empty()) {
      // Softmax over the candidates, stabilised by the largest value (candidates[0]).
      std::vector<double> probs(candidates.size());
      double total = 0;
      for (size_t i = 0; i < candidates.size(); ++i) {
        probs[i] = std::exp(static_cast<double>(work[candidates[i]] - work[candidates[0]]));
        total += probs[i];
      }
      for (double& p : probs) p /= total;
      // Both filters keep a prefix of the candidates (probs[0] is the largest, so min-p keeps
      // at least it); min-p's ratio to the top is the same before and after top-p renormalises.
      const size_t keep =
          std::min(NucleusSize(probs, params.top_p), MinPSize(probs, params.min_p));
      double kept_mass = 0;
      for (size_t i = 0; i < keep; ++i) kept_mass += probs[i];
      const double u = UniformDouble(rng) * kept_mass;
      double cumulative = 0;
      result.id = candidates[keep - 1];  // guards against rounding at the end of the walk
      for (size_t i = 0; i < keep; ++i) {
        cumulative += probs[i];
        if (u < cumulative) {
          result.id = candidates[i];
          break;
        }
      }
    }
  }
  if (result.id >= 0) result.logprob = logprobs[result.id];
  return result;
}

}  // namespace mnemo::sampling
