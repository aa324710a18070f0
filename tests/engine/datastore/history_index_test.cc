// HistoryIndex and MixRecall (docs/recall.md): exact longest-context matches, disagreement,
// forgetting beyond capacity, growth (bucket rebuilds) and the mixture's arithmetic.
#include "engine/datastore/history_index.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mnemo::datastore {
namespace {

void AppendText(HistoryIndex& index, const std::string& text) {
  for (unsigned char c : text) index.Append(c, 1);
}

void AppendRandom(HistoryIndex& index, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (int i = 0; i < n; ++i) index.Append(static_cast<int>('a' + rng() % 26), 1);
}

TEST(HistoryIndexTest, EmptyAndShortHistoriesPredictNothing) {
  HistoryIndex index(1024);
  EXPECT_EQ(index.Query().occurrences, 0);
  AppendText(index, "ab");
  EXPECT_EQ(index.Query().occurrences, 0);
  EXPECT_EQ(index.size(), 2);
}

TEST(HistoryIndexTest, FollowsTheLongestMatchingContextToTheEnd) {
  HistoryIndex index(1 << 16);
  AppendText(index, "The pass key is 48213. Remember it.\n");
  AppendRandom(index, 5000, 1);
  AppendText(index, "\nWhat is the pass key? The pass key is ");
  std::string recalled;
  for (int i = 0; i < 5; ++i) {
    const RecallPrediction p = index.Query();
    ASSERT_GT(p.occurrences, 0) << i;
    EXPECT_GE(p.match_bytes, 16) << i;  // " The pass key is " and what follows it
    recalled.push_back(static_cast<char>(p.next.front().first));
    index.Append(p.next.front().first, 1);
  }
  EXPECT_EQ(recalled, "48213");
}

TEST(HistoryIndexTest, EarlierOccurrencesThatDisagreeShareTheVote) {
  HistoryIndex index(1024);
  AppendText(index, "a colour = red;\nxxxx colour = blue;\nyyyy colour = red;\nzzzz colour = ");
  const RecallPrediction p = index.Query();
  ASSERT_EQ(p.occurrences, 3);
  ASSERT_EQ(p.next.size(), 2u);
  EXPECT_EQ(p.next[0], std::make_pair(static_cast<int>('r'), 2));
  EXPECT_EQ(p.next[1], std::make_pair(static_cast<int>('b'), 1));
  EXPECT_EQ(p.match_bytes, 10);  // " colour = "
  RecallOptions options;
  const float ramp = 3.0f / static_cast<float>(options.full_match_bytes - options.min_match_bytes);
  EXPECT_NEAR(RecallLambda(p, options), options.max_lambda * ramp * 2.0f / 3.0f, 1e-6);
}

TEST(HistoryIndexTest, ForgetsWhatLeftItsCapacity) {
  HistoryIndex index(256);
  AppendText(index, "secret = 7Q2X9;\n");
  AppendRandom(index, 300, 2);
  EXPECT_EQ(index.size(), 256);
  EXPECT_EQ(index.appended(), 316);
  AppendText(index, "\nsecret = ");
  const RecallPrediction p = index.Query();
  // The definition is gone; whatever matches now is shorter than "secret = ".
  EXPECT_LT(p.match_bytes, 9);
}

TEST(HistoryIndexTest, FindsAFactFarBack) {
  HistoryIndex index(1 << 20);
  AppendText(index, "\nlocker combination: 31-07-44\n");
  AppendRandom(index, 200000, 3);
  AppendText(index, "\nlocker combination: ");
  const RecallPrediction p = index.Query();
  ASSERT_GT(p.occurrences, 0);
  EXPECT_EQ(p.next.front().first, '3');
  EXPECT_EQ(p.match_tokens, 21);  // the whole line and the newline before it
  EXPECT_GT(index.bytes(), 200000 * (4 + 1 + 8 * 3));
}

TEST(HistoryIndexTest, ACopyIsIndependent) {
  HistoryIndex index(4096);
  AppendText(index, "\nalpha = 1\nalpha = ");
  HistoryIndex copy = index;
  AppendText(copy, "2\nalpha = ");
  EXPECT_EQ(index.Query().next.front().first, '1');
  EXPECT_EQ(copy.Query().occurrences, 2);
}

TEST(MixRecallTest, LambdaZeroLeavesTheDistributionAndMatchesMoveMass) {
  std::vector<float> logprobs(8, std::log(1.0f / 8));
  RecallPrediction none;
  std::vector<float> unchanged = logprobs;
  EXPECT_EQ(MixRecall(absl::MakeSpan(unchanged), none, RecallOptions()), 0.0f);
  EXPECT_EQ(unchanged, logprobs);

  RecallPrediction short_match;
  short_match.match_bytes = 5;  // below min_match_bytes
  short_match.next = {{3, 1}};
  short_match.occurrences = 1;
  EXPECT_EQ(MixRecall(absl::MakeSpan(unchanged), short_match, RecallOptions()), 0.0f);

  RecallPrediction p;
  p.match_bytes = 40;
  p.next = {{3, 3}, {5, 1}};
  p.occurrences = 4;
  std::vector<float> mixed = logprobs;
  const float lambda = MixRecall(absl::MakeSpan(mixed), p, RecallOptions());
  EXPECT_NEAR(lambda, 0.9f * 0.75f, 1e-6);
  double total = 0;
  for (float lp : mixed) total += std::exp(lp);
  EXPECT_NEAR(total, 1.0, 1e-5);
  EXPECT_NEAR(std::exp(mixed[3]), lambda * 0.75 + (1 - lambda) / 8, 1e-5);
  EXPECT_NEAR(std::exp(mixed[5]), lambda * 0.25 + (1 - lambda) / 8, 1e-5);
  EXPECT_NEAR(std::exp(mixed[0]), (1 - lambda) / 8, 1e-5);
}

}  // namespace
}  // namespace mnemo::datastore
