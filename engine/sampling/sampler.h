// Sampling: choosing the next token from a model's next-token log-probabilities.
//
// Pure functions over a span of log-probs (or logits) plus a seeded RNG that the request owns,
// so the same seed, prompt and session state always give the same tokens. Nothing here knows
// about tensors or the model; the scheduler hands in a float span of length vocab.
//
// Pipeline of Sample(): copy -> repetition penalty -> presence/frequency penalties -> logit
// bias -> mask forbidden ids -> greedy when temperature == 0, else divide by temperature ->
// top-k -> softmax -> top-p and min-p (both keep a prefix of the sorted candidates; the
// shorter one wins) -> draw. Every knob at its default leaves the values untouched, so a
// request that sets none samples exactly as before the knob existed.
// Ties are always broken towards the lower id, so results never depend on sort stability.
#ifndef MNEMO_ENGINE_SAMPLING_SAMPLER_H_
#define MNEMO_ENGINE_SAMPLING_SAMPLER_H_

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "absl/types/span.h"

namespace mnemo::sampling {

struct SamplingParams {
  float temperature = 1.0f;         // 0 = greedy
  int top_k = 0;                    // 0 = off
  float top_p = 1.0f;               // in (0, 1]; 1 = off
  float repetition_penalty = 1.0f;  // > 0; 1 = off
  float min_p = 0.0f;               // in [0, 1]; 0 = off
  float presence_penalty = 0.0f;    // 0 = off
  float frequency_penalty = 0.0f;   // 0 = off
  // (id, bias) pairs added to the values; ids outside the vocabulary are ignored.
  std::vector<std::pair<int, float>> logit_bias;
  int top_logprobs = 0;             // alternatives to report
};

struct Alternative {
  int id = 0;
  float logprob = 0;  // the model's log-prob (unmodified)
};

struct SampleResult {
  int id = -1;
  // Natural-log probability of `id` under the model's distribution, before repetition
  // penalty, temperature and filtering: what Score would report for the same token.
  float logprob = 0;
  // The `top_logprobs` most likely ids under the model's distribution (again unmodified),
  // most likely first, excluding forbidden ids.
  std::vector<Alternative> top;
};

// The RNG a request owns. Draws are platform-independent (see UniformDouble).
using Rng = std::mt19937_64;

// A double in [0, 1) from 53 random bits: unlike std::uniform_real_distribution it is the same
// on every standard library.
double UniformDouble(Rng& rng);

// CTRL repetition penalty (Keskar et al. 2019), in place: for each distinct id in `previous`,
// a positive value is divided by `penalty` and a negative one multiplied by it. Applied to
// log-probs (all <= 0) every repeated token is made less likely when penalty > 1.
void ApplyRepetitionPenalty(absl::Span<float> logits, absl::Span<const int> previous,
                            float penalty);

// OpenAI presence and frequency penalties, in place: for each distinct id in `previous`
// (ids outside the span ignored), value -= presence * [count > 0] + frequency * count, count
// being how often the id occurs in `previous`. No-op when both are 0.
void ApplyPresenceFrequencyPenalties(absl::Span<float> logits, absl::Span<const int> previous,
                                     float presence, float frequency);

// Adds each bias to its id's value, in place (ids outside the span are ignored).
void ApplyLogitBias(absl::Span<float> logits, absl::Span<const std::pair<int, float>> bias);

// Sets the given ids to -infinity (ids outside the span are ignored).
void MaskIds(absl::Span<float> logits, absl::Span<const int> ids);

// The index of the largest value, the lowest on ties; -1 when every value is -infinity/NaN.
int Argmax(absl::Span<const float> logits);

// Indices of finite values sorted by value descending, ties by id ascending; when k > 0 only
// the first k of them.
std::vector<int> SortedCandidates(absl::Span<const float> logits, int k);

// Keeps the smallest prefix of `sorted` (probabilities `probs`, sorted descending, summing to 1)
// whose mass is >= top_p; returns its length (>= 1 when sorted is non-empty).
size_t NucleusSize(absl::Span<const double> probs, float top_p);

// Min-p: the length of the prefix of `probs` (sorted descending) whose values are
// >= min_p * probs[0]; all of them when min_p <= 0.
size_t MinPSize(absl::Span<const double> probs, float min_p);

// Chooses the next token. `logprobs` are the model's next-token log-probs [vocab];
// `previous` the ids this request generated so far (for the penalties); `forbidden` ids that may
// never be chosen (e.g. BOS, PAD, and EOS when the request ignores it). Returns id -1 only when
// every id is forbidden or -infinity.
SampleResult Sample(absl::Span<const float> logprobs, const SamplingParams& params,
                    absl::Span<const int> previous, absl::Span<const int> forbidden, Rng& rng);

// The n most likely ids of `logprobs` (model values), skipping `forbidden`.
std::vector<Alternative> TopAlternatives(absl::Span<const float> logprobs, int n,
                                         absl::Span<const int> forbidden);

}  // namespace mnemo::sampling

#endif  // MNEMO_ENGINE_SAMPLING_SAMPLER_H_
