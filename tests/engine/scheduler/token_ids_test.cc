// Requests that carry token ids instead of text (issue 21): prompt_token_ids for Generate,
// token_ids for Score, stop_token_ids and the id-keyed sampling knobs. Ids are fed exactly as
// given, never primed with BOS; a text request primes a fresh sequence with BOS.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/engine/scheduler/scheduler_fixture.h"

namespace mnemo::scheduler {
namespace {

std::vector<int> BytesOf(const std::string& text) {
  std::vector<int> ids;
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

GenerateOptions GreedyIds(std::vector<int> ids, int max_new_tokens, std::string session = "") {
  GenerateOptions options = Greedy("", max_new_tokens, std::move(session));
  options.prompt_token_ids = std::move(ids);
  return options;
}

absl::Status Submit(Scheduler& scheduler, GenerateOptions options) {
  Collector unused;
  return scheduler.SubmitGenerate(std::move(options), unused.stream());
}

// The first chunk of `text` given BOS: what Tokenize(add_special_tokens) gives a client.
TEST_F(SchedulerTest, IdsWithBosGenerateWhatTheSameTextDoes) {
  Start();
  const std::string prompt = "The cat sat on the mat. The dog";
  Collector text;
  GenerateOptions from_text = Greedy(prompt, 20);
  from_text.top_logprobs = 2;
  const GenerateFinal text_final = Run(from_text, text);
  std::vector<int> ids = {model::kBosId};
  for (int id : BytesOf(prompt)) ids.push_back(id);
  Collector by_ids;
  GenerateOptions from_ids = GreedyIds(ids, 20);
  from_ids.top_logprobs = 2;
  const GenerateFinal ids_final = Run(from_ids, by_ids);
  ASSERT_TRUE(ids_final.status.ok()) << ids_final.status;
  EXPECT_EQ(by_ids.ids(), text.ids());
  EXPECT_EQ(by_ids.text(), text.text());
  ASSERT_EQ(by_ids.tokens().size(), text.tokens().size());
  for (size_t i = 0; i < text.tokens().size(); ++i) {
    EXPECT_NEAR(by_ids.tokens()[i].logprob, text.tokens()[i].logprob, 1e-5) << i;
  }
  EXPECT_EQ(text_final.usage.prompt_tokens, static_cast<int>(prompt.size()));
  EXPECT_EQ(ids_final.usage.prompt_tokens, static_cast<int>(ids.size()));  // as given
}

TEST_F(SchedulerTest, IdsAreFedWithoutBos) {
  Start();
  const std::string prompt = "no BOS in front of me";
  Collector c;
  Run(GreedyIds(BytesOf(prompt), 16), c);
  EXPECT_EQ(c.ids(), ManualGreedy(BytesOf(prompt), 16));  // the input has no BOS
  // The text's BOS changes what the first token is sampled from.
  Collector text;
  Run(Greedy(prompt, 16), text);
  ASSERT_FALSE(c.tokens().empty());
  ASSERT_FALSE(text.tokens().empty());
  EXPECT_GT(std::abs(c.tokens()[0].logprob - text.tokens()[0].logprob), 1e-6);
}

TEST_F(SchedulerTest, IdsContinueASessionLikeText) {
  Start();
  CreateSession("text");
  CreateSession("ids");
  Collector a, b;
  Run(Greedy("first part. ", 4, "text"), a);
  Run(Greedy("first part. ", 4, "ids"), b);
  // On a primed session, ids and the same text continue identically.
  Collector text, ids;
  Run(Greedy("second part", 12, "text"), text);
  const GenerateFinal final = Run(GreedyIds(BytesOf("second part"), 12, "ids"), ids);
  EXPECT_EQ(ids.ids(), text.ids());
  EXPECT_EQ(final.usage.session_tokens, GetSession("text")->tokens_seen);
}

TEST_F(SchedulerTest, OutOfRangeIdsAreRefusedNamingTheFirst) {
  Start();
  const int vocab = model::kByteVocabSize;
  absl::Status s = Submit(*scheduler_, GreedyIds({'a', 'b', vocab, -1}, 4));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(s.message(), "prompt_token_ids[2]")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), std::to_string(vocab))) << s;
  s = Submit(*scheduler_, GreedyIds({-5}, 4));
  EXPECT_TRUE(absl::StartsWith(s.message(), "prompt_token_ids[0]")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "-5")) << s;

  GenerateOptions both = GreedyIds({'a'}, 4);
  both.prompt = "a";
  s = Submit(*scheduler_, both);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "prompt_token_ids")) << s;
  EXPECT_EQ(Submit(*scheduler_, Greedy("", 4)).code(), absl::StatusCode::kInvalidArgument);

  GenerateOptions stop = Greedy("a", 4);
  stop.stop_token_ids = {1, vocab + 3};
  s = Submit(*scheduler_, stop);
  EXPECT_TRUE(absl::StartsWith(s.message(), "stop_token_ids[1]")) << s;
  GenerateOptions bias = Greedy("a", 4);
  bias.sampling.logit_bias = {{'x', 1.0f}, {vocab, 1.0f}};
  s = Submit(*scheduler_, bias);
  EXPECT_TRUE(absl::StartsWith(s.message(), "sampling.logit_bias[259]")) << s;

  Waiter<absl::StatusOr<ScoreResult>> w;
  ScoreOptions score;
  score.token_ids = {'a', 'b', 'c', 300};
  scheduler_->SubmitScore(score, w.Callback());
  absl::StatusOr<ScoreResult> r = w.Wait();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(r.status().message(), "token_ids[3]")) << r.status();
}

TEST_F(SchedulerTest, StopTokenEndsGenerationIncludingIt) {
  Start();
  const std::string prompt = "Once upon a time";
  Collector first;
  Run(Greedy(prompt, 24), first);
  const std::vector<int> all = first.ids();
  ASSERT_EQ(all.size(), 24u);
  const int stop = all[5];
  size_t at = 0;
  while (all[at] != stop) ++at;  // its first occurrence (<= 5)
  GenerateOptions options = Greedy(prompt, 24);
  options.stop_token_ids = {stop};
  Collector second;
  const GenerateFinal final = Run(options, second);
  EXPECT_EQ(final.reason, FinishReason::kStop);
  EXPECT_EQ(second.ids(), std::vector<int>(all.begin(), all.begin() + at + 1));
  EXPECT_EQ(final.usage.generated_tokens, static_cast<int>(at + 1));
}

TEST_F(SchedulerTest, LogitBiasReachesTheSampler) {
  Start();
  GenerateOptions options = Greedy("abc", 8);
  options.sampling.logit_bias = {{'x', 100.0f}};
  Collector c;
  Run(options, c);
  EXPECT_EQ(c.bytes(), "xxxxxxxx");
  // A strong presence penalty forbids repeating it: the second token is something else.
  options.sampling.presence_penalty = 2.0f;
  options.sampling.logit_bias = {{'x', 1.9f}};
  options.max_new_tokens = 2;
  Collector penalised;
  Run(options, penalised);
  ASSERT_EQ(penalised.ids().size(), 2u);
  EXPECT_NE(penalised.ids()[0], penalised.ids()[1]);
}

TEST_F(SchedulerTest, ScoreIdsWithBosEqualsText) {
  Start();
  const std::string text = "Scoring ids must agree with scoring the text they spell.";
  std::vector<int> ids = {model::kBosId};
  for (int id : BytesOf(text)) ids.push_back(id);
  absl::StatusOr<ScoreResult> by_text = Score("", text, false, true);
  ASSERT_TRUE(by_text.ok()) << by_text.status();
  Waiter<absl::StatusOr<ScoreResult>> w;
  ScoreOptions options;
  options.token_ids = ids;
  options.token_logprobs = true;
  scheduler_->SubmitScore(options, w.Callback());
  absl::StatusOr<ScoreResult> by_ids = w.Wait();
  ASSERT_TRUE(by_ids.ok()) << by_ids.status();
  // ids[0] (BOS) is context only; ids[1..] are the text's tokens, scored alike.
  EXPECT_EQ(by_ids->token_count, static_cast<int64_t>(text.size()));
  EXPECT_EQ(by_ids->byte_count, static_cast<int64_t>(text.size()));
  ASSERT_EQ(by_ids->logprobs.size(), by_text->logprobs.size());
  for (size_t i = 0; i < text.size(); ++i) {
    EXPECT_NEAR(by_ids->logprobs[i], by_text->logprobs[i], 1e-5) << i;
  }
  EXPECT_NEAR(by_ids->bits_per_byte, by_text->bits_per_byte, 1e-6);
}

TEST_F(SchedulerTest, ScoreIdsWithoutBosScoresFromTheSecond) {
  Start();
  const std::vector<int> ids = BytesOf("plain bytes, no BOS: \xC3\xA9!");
  Waiter<absl::StatusOr<ScoreResult>> w;
  ScoreOptions options;
  options.token_ids = ids;
  options.token_logprobs = true;
  scheduler_->SubmitScore(options, w.Callback());
  absl::StatusOr<ScoreResult> r = w.Wait();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->token_count, static_cast<int64_t>(ids.size() - 1));
  EXPECT_EQ(r->byte_count, static_cast<int64_t>(ids.size() - 1));  // one byte per token
  // By hand: one Forward over the ids; row i predicts ids[i + 1].
  std::unique_ptr<model::Model> model = testing::TinyModel();
  memory::SessionMemory memory = model->NewMemory();
  absl::StatusOr<torch::Tensor> out = model->Forward(ids, memory, model::Outputs::kAll);
  ASSERT_TRUE(out.ok()) << out.status();
  double total = 0;
  ASSERT_EQ(r->logprobs.size(), ids.size() - 1);
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    const float expected = (*out)[i][ids[i + 1]].item<float>();
    EXPECT_NEAR(r->logprobs[i], expected, 1e-5) << i;
    total += expected;
  }
  EXPECT_NEAR(r->total_logprob, total, 1e-4);
  EXPECT_NEAR(r->bits_per_byte, -total / std::log(2.0) / (ids.size() - 1), 1e-5);

  // A one-shot request needs two ids; a session's first token is context when it is fresh,
  // and scored once the session has a history.
  Waiter<absl::StatusOr<ScoreResult>> single;
  options.token_ids = {'a'};
  scheduler_->SubmitScore(options, single.Callback());
  EXPECT_EQ(single.Wait().status().code(), absl::StatusCode::kInvalidArgument);
  CreateSession("s");
  options.session_id = "s";
  options.update_memory = true;
  Waiter<absl::StatusOr<ScoreResult>> fresh;
  scheduler_->SubmitScore(options, fresh.Callback());
  absl::StatusOr<ScoreResult> fresh_result = fresh.Wait();
  ASSERT_TRUE(fresh_result.ok()) << fresh_result.status();
  EXPECT_EQ(fresh_result->token_count, 0);
  EXPECT_EQ(fresh_result->bits_per_byte, 0);
  Waiter<absl::StatusOr<ScoreResult>> second;
  options.token_ids = {'b'};
  scheduler_->SubmitScore(options, second.Callback());
  absl::StatusOr<ScoreResult> second_result = second.Wait();
  ASSERT_TRUE(second_result.ok()) << second_result.status();
  EXPECT_EQ(second_result->token_count, 1);
  memory::SessionMemory fresh_memory = model->NewMemory();
  const int a[] = {'a'};
  absl::StatusOr<torch::Tensor> after_a = model->Forward(a, fresh_memory, model::Outputs::kLast);
  ASSERT_TRUE(after_a.ok()) << after_a.status();
  EXPECT_NEAR(second_result->logprobs[0], (*after_a)[0]['b'].item<float>(), 1e-5);
  EXPECT_EQ(GetSession("s")->tokens_seen, 2);
}

}  // namespace
}  // namespace mnemo::scheduler
