#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace mnemo::sampling {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Log-probs of a random distribution over `vocab` ids.
std::vector<float> RandomLogprobs(Rng& rng, int vocab, float sharpness = 3.0f) {
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

std::vector<float> LogOf(const std::vector<double>& probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(p > 0 ? static_cast<float>(std::log(p)) : kNegInf);
  return out;
}

TEST(SamplerTest, SameSeedSameSequence) {
  Rng dist_rng(1);
  std::vector<float> logprobs = RandomLogprobs(dist_rng, 259, 2.0f);
  SamplingParams params;
  params.temperature = 0.9f;
  params.top_k = 50;
  params.top_p = 0.95f;
  params.repetition_penalty = 1.2f;
  auto run = [&](uint64_t seed) {
    Rng rng(seed);
    std::vector<int> out;
    for (int i = 0; i < 200; ++i) {
      out.push_back(Sample(logprobs, params, out, {256, 258}, rng).id);
    }
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(SamplerTest, UniformDoubleIsInUnitInterval) {
  Rng rng(3);
  double sum = 0;
  for (int i = 0; i < 10000; ++i) {
    const double u = UniformDouble(rng);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
}

TEST(SamplerTest, TopKOneEqualsGreedy) {
  Rng rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> logprobs = RandomLogprobs(rng, 64);
    std::vector<int> previous = {static_cast<int>(rng() % 64), static_cast<int>(rng() % 64)};
    SamplingParams greedy;
    greedy.temperature = 0;
    greedy.repetition_penalty = 1.3f;
    SamplingParams top1 = greedy;
    top1.temperature = 0.5f + static_cast<float>(UniformDouble(rng)) * 2;
    top1.top_k = 1;
    const int g = Sample(logprobs, greedy, previous, {}, rng).id;
    EXPECT_EQ(Sample(logprobs, top1, previous, {}, rng).id, g);
  }
}

TEST(SamplerTest, GreedyBreaksTiesTowardsLowerId) {
  std::vector<float> logprobs = LogOf({0.1, 0.4, 0.1, 0.4});
  Rng rng(0);
  SamplingParams greedy;
  greedy.temperature = 0;
  EXPECT_EQ(Sample(logprobs, greedy, {}, {}, rng).id, 1);
  EXPECT_EQ(Sample(logprobs, greedy, {}, {1}, rng).id, 3);
}

TEST(SamplerTest, TopPKeepsTheRightNucleus) {
  const std::vector<float> logprobs = LogOf({0.05, 0.5, 0.15, 0.3});  // sorted: 1, 3, 2, 0
  struct Case {
    float top_p;
    std::vector<int> allowed;
  };
  for (const Case& c : {Case{0.4f, {1}}, Case{0.5f, {1}}, Case{0.8f, {1, 3}},
                        Case{0.81f, {1, 3, 2}}, Case{0.95f, {1, 3, 2}}, Case{1.0f, {0, 1, 2, 3}}}) {
    SamplingParams params;
    params.top_p = c.top_p;
    Rng rng(5);
    std::vector<int> counts(4, 0);
    for (int i = 0; i < 4000; ++i) counts[Sample(logprobs, params, {}, {}, rng).id]++;
    for (int id = 0; id < 4; ++id) {
      const bool allowed = std::count(c.allowed.begin(), c.allowed.end(), id) > 0;
      if (allowed) {
        EXPECT_GT(counts[id], 0) << "top_p " << c.top_p << " id " << id;
      } else {
        EXPECT_EQ(counts[id], 0) << "top_p " << c.top_p << " id " << id;
      }
    }
    if (c.top_p == 0.8f) {  // renormalised: 0.5/0.8 and 0.3/0.8
      EXPECT_NEAR(counts[1] / 4000.0, 0.625, 0.03);
    }
  }
}

TEST(SamplerTest, TemperatureOneFollowsTheModel) {
  const std::vector<double> probs = {0.1, 0.2, 0.3, 0.4};
  SamplingParams params;
  Rng rng(9);
  std::vector<int> counts(4, 0);
  const int n = 20000;
  for (int i = 0; i < n; ++i) counts[Sample(LogOf(probs), params, {}, {}, rng).id]++;
  for (int id = 0; id < 4; ++id) EXPECT_NEAR(counts[id] / double(n), probs[id], 0.015) << id;
}

TEST(SamplerTest, LowTemperatureSharpensHighFlattens) {
  const std::vector<float> logprobs = LogOf({0.2, 0.8});
  auto share_of_best = [&](float temperature) {
    SamplingParams params;
    params.temperature = temperature;
    Rng rng(4);
    int best = 0;
    for (int i = 0; i < 5000; ++i) best += Sample(logprobs, params, {}, {}, rng).id == 1;
    return best / 5000.0;
  };
  EXPECT_GT(share_of_best(0.3f), 0.95);
  EXPECT_NEAR(share_of_best(1.0f), 0.8, 0.03);
  EXPECT_LT(share_of_best(10.0f), 0.6);
}

TEST(SamplerTest, RepetitionPenaltyChangesArgmaxWhenItShould) {
  // Token 3 is the most likely (0.4) but was already generated; token 5 (0.35) is next.
  std::vector<double> probs(8, 0.25 / 6);
  probs[3] = 0.4;
  probs[5] = 0.35;
  const std::vector<float> logprobs = LogOf(probs);
  SamplingParams params;
  params.temperature = 0;
  Rng rng(0);
  EXPECT_EQ(Sample(logprobs, params, {3}, {}, rng).id, 3);  // penalty 1 = off
  params.repetition_penalty = 1.1f;  // log(0.4)*1.1 = -1.008 > log(0.35) = -1.050: still 3
  EXPECT_EQ(Sample(logprobs, params, {3}, {}, rng).id, 3);
  params.repetition_penalty = 1.5f;  // -1.374 < -1.050: now 5
  EXPECT_EQ(Sample(logprobs, params, {3}, {}, rng).id, 5);
  EXPECT_EQ(Sample(logprobs, params, {3, 3, 3}, {}, rng).id, 5);  // applied once per id
  // The reported logprob is the model's, not the penalised one.
  EXPECT_FLOAT_EQ(Sample(logprobs, params, {3}, {}, rng).logprob, logprobs[5]);
}

TEST(SamplerTest, RepetitionPenaltyOnLogitsDividesPositiveMultipliesNegative) {
  std::vector<float> logits = {2.0f, -2.0f, 1.0f};
  ApplyRepetitionPenalty(absl::MakeSpan(logits), {0, 1, 0, 7, -1}, 2.0f);
  EXPECT_FLOAT_EQ(logits[0], 1.0f);
  EXPECT_FLOAT_EQ(logits[1], -4.0f);
  EXPECT_FLOAT_EQ(logits[2], 1.0f);
}

TEST(SamplerTest, ReportsModelLogprobAndAlternatives) {
  const std::vector<float> logprobs = LogOf({0.05, 0.5, 0.15, 0.3});
  SamplingParams params;
  params.temperature = 0;
  params.top_logprobs = 3;
  Rng rng(0);
  SampleResult r = Sample(logprobs, params, {}, {2}, rng);
  EXPECT_EQ(r.id, 1);
  EXPECT_FLOAT_EQ(r.logprob, logprobs[1]);
  ASSERT_EQ(r.top.size(), 3u);
  EXPECT_EQ(r.top[0].id, 1);
  EXPECT_EQ(r.top[1].id, 3);
  EXPECT_EQ(r.top[2].id, 0);  // 2 is forbidden
  EXPECT_FLOAT_EQ(r.top[1].logprob, logprobs[3]);
}

TEST(SamplerTest, EverythingForbiddenGivesMinusOne) {
  const std::vector<float> logprobs = LogOf({0.5, 0.5});
  Rng rng(0);
  EXPECT_EQ(Sample(logprobs, SamplingParams(), {}, {0, 1}, rng).id, -1);
}

// Property: whatever the parameters, a sampled id is never forbidden, is among the top_k of
// the penalised distribution and inside its nucleus.
TEST(SamplerTest, ConstraintsNeverViolated) {
  Rng rng(2024);
  const std::vector<int> forbidden = {0, 13, 31};
  for (int trial = 0; trial < 300; ++trial) {
    const int vocab = 40;
    std::vector<float> logprobs = RandomLogprobs(rng, vocab, 4.0f);
    SamplingParams params;
    params.temperature = static_cast<float>(UniformDouble(rng) * 2);
    params.top_k = static_cast<int>(rng() % 6);
    params.top_p = static_cast<float>(0.05 + UniformDouble(rng) * 0.95);
    params.repetition_penalty = static_cast<float>(0.5 + UniformDouble(rng) * 2);
    std::vector<int> previous = {static_cast<int>(rng() % vocab), static_cast<int>(rng() % vocab)};

    // The allowed set, computed independently of Sample().
    std::vector<float> work = logprobs;
    ApplyRepetitionPenalty(absl::MakeSpan(work), previous, params.repetition_penalty);
    MaskIds(absl::MakeSpan(work), forbidden);
    std::vector<int> allowed;
    if (params.temperature == 0) {
      allowed = {Argmax(work)};
    } else {
      for (float& v : work) v /= params.temperature;
      std::vector<int> sorted = SortedCandidates(work, params.top_k);
      std::vector<double> probs;
      double total = 0;
      for (int id : sorted) total += std::exp(double(work[id]) - work[sorted[0]]);
      for (int id : sorted) probs.push_back(std::exp(double(work[id]) - work[sorted[0]]) / total);
      allowed.assign(sorted.begin(), sorted.begin() + NucleusSize(probs, params.top_p));
    }
    for (int draw = 0; draw < 50; ++draw) {
      const int id = Sample(logprobs, params, previous, forbidden, rng).id;
      ASSERT_GE(id, 0);
      ASSERT_EQ(std::count(forbidden.begin(), forbidden.end(), id), 0);
      ASSERT_GT(std::count(allowed.begin(), allowed.end(), id), 0)
          << "trial " << trial << " id " << id;
      if (params.top_k > 0) {
        ASSERT_LE(allowed.size(), static_cast<size_t>(params.top_k));
      }
    }
  }
}

TEST(SamplerTest, NucleusSizeEdges) {
  const std::vector<double> probs = {0.5, 0.3, 0.2};
  EXPECT_EQ(NucleusSize(probs, 0.01f), 1u);
  EXPECT_EQ(NucleusSize(probs, 0.8f), 2u);
  EXPECT_EQ(NucleusSize(probs, 0.9f), 3u);
  EXPECT_EQ(NucleusSize(probs, 1.0f), 3u);
  EXPECT_EQ(NucleusSize({}, 0.5f), 0u);
}

}  // namespace
}  // namespace mnemo::sampling
