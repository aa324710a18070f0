// The sampling knobs added for imported models (issue 21): min_p, presence and frequency
// penalties, logit bias. Each is checked on hand-made values; together they keep a seeded
// draw deterministic; at their defaults Sample() is bit-identical to the pipeline before them.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <utility>
#include <vector>

#include "engine/sampling/sampler.h"
#include "gtest/gtest.h"

namespace mnemo::sampling {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<float> LogOf(const std::vector<double>& probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(p > 0 ? static_cast<float>(std::log(p)) : kNegInf);
  return out;
}

std::vector<float> RandomLogprobs(Rng& rng, int vocab, float sharpness) {
  std::vector<double> logits(vocab);
  double max = -1e30;
  for (double& l : logits) {
    l = sharpness * (UniformDouble(rng) * 2 - 1);
    max = std::max(max, l);
  }
  double total = 0;
  for (double l : logits) total += std::exp(l - max);
  std::vector<float> out(vocab);
  for (int i = 0; i < vocab; ++i) out[i] = static_cast<float>(logits[i] - max - std::log(total));
  return out;
}

// Sample() as it was before min_p, the OpenAI penalties and logit bias existed, kept verbatim
// (from its public pieces) so that the defaults can be checked against it.
SampleResult SampleBeforeIssue21(absl::Span<const float> logprobs, const SamplingParams& params,
                                 absl::Span<const int> previous,
                                 absl::Span<const int> forbidden, Rng& rng) {
  std::vector<float> work(logprobs.begin(), logprobs.end());
  ApplyRepetitionPenalty(absl::MakeSpan(work), previous, params.repetition_penalty);
  MaskIds(absl::MakeSpan(work), forbidden);
  SampleResult result;
  result.top = TopAlternatives(logprobs, params.top_logprobs, forbidden);
  if (params.temperature <= 0.0f) {
    result.id = Argmax(work);
  } else {
    for (float& v : work) v /= params.temperature;
    std::vector<int> candidates = SortedCandidates(work, params.top_k);
    if (!candidates.empty()) {
      std::vector<double> probs(candidates.size());
      double total = 0;
      for (size_t i = 0; i < candidates.size(); ++i) {
        probs[i] = std::exp(static_cast<double>(work[candidates[i]] - work[candidates[0]]));
        total += probs[i];
      }
      for (double& p : probs) p /= total;
      const size_t keep = NucleusSize(probs, params.top_p);
      double kept_mass = 0;
      for (size_t i = 0; i < keep; ++i) kept_mass += probs[i];
      const double u = UniformDouble(rng) * kept_mass;
      double cumulative = 0;
      result.id = candidates[keep - 1];
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

TEST(SamplerKnobsTest, DefaultsAreBitIdenticalToBefore) {
  Rng dist_rng(77);
  for (int trial = 0; trial < 100; ++trial) {
    const std::vector<float> logprobs = RandomLogprobs(dist_rng, 259, 3.0f);
    SamplingParams params;  // the new knobs at their defaults
    params.temperature = static_cast<float>(UniformDouble(dist_rng) * 1.5);
    params.top_k = static_cast<int>(dist_rng() % 20);
    params.top_p = static_cast<float>(0.3 + UniformDouble(dist_rng) * 0.7);
    params.repetition_penalty = static_cast<float>(0.8 + UniformDouble(dist_rng));
    params.top_logprobs = 3;
    Rng a(trial);
    Rng b(trial);
    std::vector<int> previous;
    for (int step = 0; step < 20; ++step) {
      const SampleResult now = Sample(logprobs, params, previous, {256, 258}, a);
      const SampleResult before = SampleBeforeIssue21(logprobs, params, previous, {256, 258}, b);
      ASSERT_EQ(now.id, before.id) << "trial " << trial << " step " << step;
      ASSERT_EQ(now.logprob, before.logprob);
      ASSERT_EQ(now.top.size(), before.top.size());
      previous.push_back(now.id);
    }
  }
  // And each new helper leaves values untouched at its default.
  std::vector<float> values = {0.5f, -1.25f, 3.0f};
  const std::vector<float> copy = values;
  ApplyPresenceFrequencyPenalties(absl::MakeSpan(values), {0, 1, 1}, 0.0f, 0.0f);
  ApplyLogitBias(absl::MakeSpan(values), {});
  EXPECT_EQ(values, copy);
  EXPECT_EQ(MinPSize(std::vector<double>{0.9, 0.09, 0.01}, 0.0f), 3u);
}

TEST(SamplerKnobsTest, SameSeedSameSequenceWithEveryKnob) {
  Rng dist_rng(1);
  const std::vector<float> logprobs = RandomLogprobs(dist_rng, 259, 2.0f);
  SamplingParams params;
  params.temperature = 0.9f;
  params.top_k = 50;
  params.top_p = 0.95f;
  params.min_p = 0.05f;
  params.presence_penalty = 0.4f;
  params.frequency_penalty = 0.3f;
  params.logit_bias = {{65, 2.0f}, {66, -100.0f}};
  auto run = [&](uint64_t seed) {
    Rng rng(seed);
    std::vector<int> out;
    for (int i = 0; i < 200; ++i) out.push_back(Sample(logprobs, params, out, {256}, rng).id);
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
  const std::vector<int> ids = run(7);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 66), 0);  // banned by its bias
}

TEST(SamplerKnobsTest, MinPKeepsExactlyTheTokensAboveItsShareOfTheTop) {
  // Sorted: 0 (0.5), 1 (0.25), 2 (0.125), 3 (0.0625), 4 (0.0625).
  const std::vector<double> probs = {0.5, 0.25, 0.125, 0.0625, 0.0625};
  EXPECT_EQ(MinPSize(probs, 0.2f), 3u);   // >= 0.1: 0, 1, 2
  EXPECT_EQ(MinPSize(probs, 0.6f), 1u);   // >= 0.3: 0 alone
  EXPECT_EQ(MinPSize(probs, 0.1f), 5u);   // >= 0.05: all
  EXPECT_EQ(MinPSize(probs, 1.0f), 1u);   // the top always stays
  EXPECT_EQ(MinPSize({}, 0.5f), 0u);

  const std::vector<float> logprobs = LogOf(probs);
  SamplingParams params;
  params.min_p = 0.2f;
  Rng rng(3);
  std::vector<int> counts(5, 0);
  const int n = 8000;
  for (int i = 0; i < n; ++i) counts[Sample(logprobs, params, {}, {}, rng).id]++;
  std::set<int> seen;
  for (int id = 0; id < 5; ++id) {
    if (counts[id] > 0) seen.insert(id);
  }
  EXPECT_EQ(seen, (std::set<int>{0, 1, 2}));
  EXPECT_NEAR(counts[0] / double(n), 0.5 / 0.875, 0.02);  // renormalised over the kept three
  // With temperature, min_p applies to the tempered distribution: at T = 2 the ratios are
  // sqrt'ed (0.125/0.5 -> 0.5), so min_p 0.4 keeps 0, 1 and 2 and drops 3 and 4 (0.354).
  params.temperature = 2.0f;
  params.min_p = 0.4f;
  std::vector<int> tempered(5, 0);
  for (int i = 0; i < n; ++i) tempered[Sample(logprobs, params, {}, {}, rng).id]++;
  EXPECT_GT(tempered[2], 0);
  EXPECT_EQ(tempered[3] + tempered[4], 0);
}

TEST(SamplerKnobsTest, PresenceAndFrequencyPenaltiesSubtractByHand) {
  std::vector<float> logits = {1.0f, 2.0f, 3.0f, 4.0f};
  // id 1 once, id 3 twice; 9 and -1 are outside the vocabulary and ignored.
  ApplyPresenceFrequencyPenalties(absl::MakeSpan(logits), {1, 3, 3, 9, -1}, 0.5f, 0.25f);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, 1.25f, 3.0f, 3.0f}));
  // Negative values encourage repetition.
  std::vector<float> more = {0.0f, 0.0f};
  ApplyPresenceFrequencyPenalties(absl::MakeSpan(more), {1}, -1.0f, 0.0f);
  EXPECT_EQ(more, (std::vector<float>{0.0f, 1.0f}));
}

TEST(SamplerKnobsTest, PenaltiesChangeTheArgmaxWhenTheyShould) {
  // log 0.4 = -0.916, log 0.35 = -1.050: token 0 leads by 0.134.
  const std::vector<float> logprobs = LogOf({0.4, 0.35, 0.25});
  SamplingParams params;
  params.temperature = 0;
  Rng rng(0);
  EXPECT_EQ(Sample(logprobs, params, {0}, {}, rng).id, 0);
  params.presence_penalty = 0.1f;  // -1.016 > -1.050: still 0
  EXPECT_EQ(Sample(logprobs, params, {0}, {}, rng).id, 0);
  params.presence_penalty = 0.2f;  // -1.116 < -1.050: now 1
  EXPECT_EQ(Sample(logprobs, params, {0}, {}, rng).id, 1);
  EXPECT_EQ(Sample(logprobs, params, {0, 0, 0}, {}, rng).id, 1);  // once, whatever the count
  params.presence_penalty = 0;
  params.frequency_penalty = 0.05f;  // counts matter: 1 use -0.966, still 0; 3 uses -1.066: 1
  EXPECT_EQ(Sample(logprobs, params, {0}, {}, rng).id, 0);
  EXPECT_EQ(Sample(logprobs, params, {0, 0, 0}, {}, rng).id, 1);
  // The reported logprob stays the model's.
  EXPECT_FLOAT_EQ(Sample(logprobs, params, {0, 0, 0}, {}, rng).logprob, logprobs[1]);
}

TEST(SamplerKnobsTest, LogitBiasShiftsAndBans) {
  const std::vector<float> logprobs = LogOf({0.5, 0.3, 0.2});
  SamplingParams params;
  params.temperature = 0;
  Rng rng(0);
  // log 0.2 + 1 = -0.609 > log 0.5 = -0.693: 2 becomes the argmax.
  params.logit_bias = {{2, 1.0f}};
  EXPECT_EQ(Sample(logprobs, params, {}, {}, rng).id, 2);
  params.logit_bias = {{2, 0.05f}};
  EXPECT_EQ(Sample(logprobs, params, {}, {}, rng).id, 0);
  std::vector<float> values = {0.0f, 1.0f, 2.0f};
  ApplyLogitBias(absl::MakeSpan(values), {{0, 0.5f}, {2, -3.0f}, {7, 1.0f}, {-1, 1.0f}});
  EXPECT_EQ(values, (std::vector<float>{0.5f, 1.0f, -1.0f}));
  // A -100 bias bans a token from sampling.
  params.temperature = 1.0f;
  params.logit_bias = {{0, -100.0f}};
  for (int i = 0; i < 2000; ++i) ASSERT_NE(Sample(logprobs, params, {}, {}, rng).id, 0);
}

}  // namespace
}  // namespace mnemo::sampling
