// CALM early exit through the scheduler: tokens report the layer that chose them, the
// schedule-relaxed threshold is applied per output token, and the result matches decoding by
// hand with Model::ForwardWithExit.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "engine/calm/threshold_schedule.h"
#include "gtest/gtest.h"
#include "tests/engine/scheduler/scheduler_fixture.h"

namespace mnemo::scheduler {
namespace {

// A tiny random model is nearly uniform (softmax response ~0), so nothing would ever exit.
// Scaling the final norm sharpens every layer's shared-head distribution into a mix of
// confident and unsure tokens.
std::unique_ptr<model::Model> SharpModel() {
  std::unique_ptr<model::Model> model = testing::TinyModel();
  torch::NoGradGuard no_grad;
  auto params = model->transformer()->named_parameters();
  params["final_norm.weight"].mul_(12.0);
  params["final_norm.bias"].mul_(12.0);
  return model;
}

// Greedy decoding by hand: the prompt at full depth, then each generated token (but the last)
// fed through ForwardWithExit with λ_t; returns ids and the exit layer of each.
void ManualExitGreedy(const std::string& prompt, int n, float lambda, std::vector<int>* ids,
                      std::vector<int>* layers) {
  std::unique_ptr<model::Model> model = SharpModel();
  memory::SessionMemory memory = model->NewMemory();
  std::vector<int> input = {model::kBosId};
  for (unsigned char c : prompt) input.push_back(c);
  absl::StatusOr<torch::Tensor> lp = model->Forward(input, memory, model::Outputs::kLast);
  ASSERT_TRUE(lp.ok());
  torch::Tensor dist = (*lp)[0];
  int layer = model->config().n_layers;
  for (int t = 0; t < n; ++t) {
    torch::Tensor masked = dist.clone();
    masked[model::kBosId] = -INFINITY;
    masked[model::kPadId] = -INFINITY;
    masked[model::kEosId] = -INFINITY;
    const int id = static_cast<int>(masked.argmax().item<int64_t>());
    ids->push_back(id);
    layers->push_back(layer);
    if (t + 1 == n) break;
    const int one[] = {id};
    absl::StatusOr<model::ExitForward> out = model->ForwardWithExit(
        one, memory, calm::ScheduledThreshold(lambda, t + 1, n));
    ASSERT_TRUE(out.ok());
    dist = out->logprobs[0];
    layer = out->exit_layers[0];
  }
}

TEST_F(SchedulerTest, EarlyExitMatchesManualDecodingAndReportsExitLayers) {
  Start(TestConfig(), SharpModel());
  const int n = 24;
  for (float lambda : {0.05f, 0.3f}) {
    GenerateOptions options = Greedy("Exit early, exit often. ", n);
    options.stop_at_eos = false;
    options.early_exit.enabled = true;
    options.early_exit.threshold = lambda;
    Collector collector;
    const GenerateFinal final = Run(options, collector);
    ASSERT_TRUE(final.status.ok()) << final.status;
    std::vector<int> want_ids, want_layers;
    ManualExitGreedy("Exit early, exit often. ", n, lambda, &want_ids, &want_layers);
    EXPECT_EQ(collector.ids(), want_ids) << "lambda " << lambda;
    std::vector<int> layers;
    for (const engine::TokenOutput& t : collector.tokens()) layers.push_back(t.exit_layer);
    EXPECT_EQ(layers, want_layers) << "lambda " << lambda;
    int early = 0;
    for (int l : layers) early += l < testing::TinyConfig().n_layers;
    EXPECT_GT(early, 0) << "lambda " << lambda << ": nothing exited, the test shows nothing";
  }
}

TEST_F(SchedulerTest, LowThresholdExitsEarlyAndThresholdOneNeverDoes) {
  Start(TestConfig(), SharpModel());
  const int depth = testing::TinyConfig().n_layers;
  auto layers_of = [&](std::optional<float> threshold, bool enabled) {
    GenerateOptions options = Greedy("The same prompt. ", 16);
    options.stop_at_eos = false;
    options.early_exit.enabled = enabled;
    options.early_exit.threshold = threshold;
    Collector collector;
    Run(options, collector);
    std::vector<int> layers;
    for (const engine::TokenOutput& t : collector.tokens()) layers.push_back(t.exit_layer);
    return std::make_pair(layers, collector.ids());
  };
  const auto [off_layers, off_ids] = layers_of(std::nullopt, false);
  for (int l : off_layers) EXPECT_EQ(l, depth);
  // Threshold 1 (and the uncalibrated model's default) never exits: same tokens as without.
  const auto [one_layers, one_ids] = layers_of(1.0f, true);
  EXPECT_EQ(one_ids, off_ids);
  for (int l : one_layers) EXPECT_EQ(l, depth);
  const auto [default_layers, default_ids] = layers_of(std::nullopt, true);
  EXPECT_EQ(default_ids, off_ids);
  // A tiny threshold lets more tokens leave early than a strict one.
  auto early_count = [&](const std::vector<int>& layers) {
    int early = 0;
    for (int l : layers) early += l < depth;
    return early;
  };
  const auto [low_layers, low_ids] = layers_of(0.001f, true);
  const auto [high_layers, high_ids] = layers_of(0.9f, true);
  EXPECT_EQ(low_layers.front(), depth);  // chosen by the prompt's full-depth output
  EXPECT_GT(early_count(low_layers), early_count(high_layers));
  EXPECT_GT(early_count(low_layers), 0);
}

TEST_F(SchedulerTest, EarlyExitLeavesTheSessionAtFullDepth) {
  Start(TestConfig(), SharpModel());
  const int depth = testing::TinyConfig().n_layers;
  CreateSession("s");
  GenerateOptions options = Greedy("Session text ", 10, "s");
  options.stop_at_eos = false;
  options.early_exit.enabled = true;
  options.early_exit.threshold = 0.001f;
  Collector first;
  ASSERT_TRUE(Run(options, first).status.ok());
  // The request's last token was fed at full depth: the next request's first token is chosen
  // by the last layer, and the state has a kNN-LM key (a kNN-LM request works right away).
  options.prompt = "";
  Collector second;
  ASSERT_TRUE(Run(options, second).status.ok());
  ASSERT_FALSE(second.tokens().empty());
  EXPECT_EQ(second.tokens().front().exit_layer, depth);
  Waiter<absl::StatusOr<engine::AddToDatastoreResult>> added;
  scheduler_->SubmitAddToDatastore({"s", "some text"}, added.Callback());
  ASSERT_TRUE(added.Wait().ok());
  Waiter<absl::StatusOr<ScoreResult>> scored;
  ScoreOptions score;
  score.session_id = "s";
  score.text = "more";
  score.knn_lm = engine::KnnLmOptions{"session", 0.5f, 4, 1.0f};
  scheduler_->SubmitScore(score, scored.Callback());
  absl::StatusOr<ScoreResult> result = scored.Wait();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(std::isfinite(result->total_logprob));
}

TEST_F(SchedulerTest, EarlyExitRejectsKnnLmAndBadThresholds) {
  Start();
  GenerateOptions options = Greedy("x", 2);
  options.early_exit.enabled = true;
  options.early_exit.threshold = 1.5f;
  Collector c;
  absl::Status s = scheduler_->SubmitGenerate(options, c.stream());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "early_exit.threshold"));
  options.early_exit.threshold = 0.5f;
  options.knn_lm = engine::KnnLmOptions{"session", 0.5f, 4, 1.0f};
  s = scheduler_->SubmitGenerate(options, c.stream());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "knn_lm"));
}

}  // namespace
}  // namespace mnemo::scheduler
