// CALM early exit through the scheduler: tokens report the layer that chose them, the
// schedule-relaxed threshold is applied per output token, and the result matches decoding by
// hand with Model::ForwardWithExit.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "engine/calm/threshold_schedule.h"
#include "gtest/gtest.h"
#include "tests/engine/model/exit_test_util.h"
#include "tests/engine/scheduler/scheduler_fixture.h"

namespace mnemo::scheduler {
namespace {

// A tiny random model is nearly uniform (softmax response ~0), so nothing would ever exit.
// Scaling the final norm sharpens every layer's shared-head distribution into a mix of
// confident and unsure tokens.
// It also gets a random exit classifier, so every measure can be served.
std::unique_ptr<model::Model> SharpModel() {
  std::unique_ptr<model::Model> model = testing::TinyModel();
  torch::NoGradGuard no_grad;
  auto params = model->transformer()->named_parameters();
  params["final_norm.weight"].mul_(12.0);
  params["final_norm.bias"].mul_(12.0);
  model->SetExitClassifier(testing::RandomExitClassifier(testing::TinyConfig(), 5));
  return model;
}

// Greedy decoding by hand: the prompt at full depth, then each generated token (but the last)
// fed through ForwardWithExit with λ_t; returns ids and the exit layer of each.
void ManualExitGreedy(const std::string& prompt, int n, float lambda, std::vector<int>* ids,
                      std::vector<int>* layers,
                      model::ExitMeasure measure = model::ExitMeasure::kSoftmaxResponse) {
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
        one, memory, calm::ScheduledThreshold(lambda, t + 1, n), measure);
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

TEST_F(SchedulerTest, EachMeasureMatchesManualDecoding) {
  // Saturation and the classifier, at thresholds (quantiles of their first-layer confidences)
  // that mix early and full-depth tokens; decoded by the batched scheduler and by hand.
  Start(TestConfig(), SharpModel());
  const std::string prompt = "Measures differ; exits must not. ";
  const int n = 24;
  std::unique_ptr<model::Model> probe = SharpModel();
  std::vector<int> text = {model::kBosId};
  for (unsigned char c : prompt + prompt) text.push_back(c);
  for (model::ExitMeasure measure :
       {model::ExitMeasure::kHiddenSaturation, model::ExitMeasure::kClassifier}) {
    const std::vector<float> confidences = testing::FirstLayerConfidences(*probe, measure, text);
    const float lambda = testing::Quantile(confidences, 0.6);
    GenerateOptions options = Greedy(prompt, n);
    options.stop_at_eos = false;
    options.early_exit.enabled = true;
    options.early_exit.threshold = lambda;
    options.early_exit.measure = measure;
    Collector collector;
    const GenerateFinal final = Run(options, collector);
    ASSERT_TRUE(final.status.ok()) << final.status;
    std::vector<int> want_ids, want_layers;
    ManualExitGreedy(prompt, n, lambda, &want_ids, &want_layers, measure);
    EXPECT_EQ(collector.ids(), want_ids) << model::ExitMeasureName(measure);
    std::vector<int> layers;
    for (const engine::TokenOutput& t : collector.tokens()) layers.push_back(t.exit_layer);
    EXPECT_EQ(layers, want_layers) << model::ExitMeasureName(measure);
    int early = 0;
    for (int l : layers) early += l < testing::TinyConfig().n_layers;
    EXPECT_GT(early, 0) << model::ExitMeasureName(measure) << ": nothing exited";
  }
}

TEST_F(SchedulerTest, StreamsOnDifferentMeasuresShareBatchesAndMatchAlone) {
  // Three streams at once (batched decode), one per measure, each equal to its own run alone.
  SchedulerConfig config = TestConfig();
  Start(config, SharpModel());
  const std::vector<model::ExitMeasure> measures = {model::ExitMeasure::kSoftmaxResponse,
                                                    model::ExitMeasure::kHiddenSaturation,
                                                    model::ExitMeasure::kClassifier};
  std::unique_ptr<model::Model> probe = SharpModel();
  auto options_for = [&](size_t i) {
    const std::string prompt = "Stream " + std::to_string(i) + " decodes here. ";
    std::vector<int> text = {model::kBosId};
    for (unsigned char c : prompt + prompt) text.push_back(c);
    GenerateOptions options = Greedy(prompt, 20);
    options.stop_at_eos = false;
    options.early_exit.enabled = true;
    options.early_exit.measure = measures[i];
    options.early_exit.threshold =
        testing::Quantile(testing::FirstLayerConfidences(*probe, measures[i], text), 0.5);
    return options;
  };
  std::vector<std::vector<int>> alone_ids, alone_layers;
  for (size_t i = 0; i < measures.size(); ++i) {
    Collector c;
    ASSERT_TRUE(Run(options_for(i), c).status.ok());
    alone_ids.push_back(c.ids());
    std::vector<int> layers;
    for (const engine::TokenOutput& t : c.tokens()) layers.push_back(t.exit_layer);
    alone_layers.push_back(layers);
  }
  std::vector<std::unique_ptr<Collector>> together(measures.size());
  for (size_t i = 0; i < measures.size(); ++i) {
    together[i] = std::make_unique<Collector>();
    ASSERT_TRUE(scheduler_->SubmitGenerate(options_for(i), together[i]->stream()).ok());
  }
  for (size_t i = 0; i < measures.size(); ++i) {
    std::optional<GenerateFinal> final = together[i]->Wait();
    ASSERT_TRUE(final.has_value() && final->status.ok());
    EXPECT_EQ(together[i]->ids(), alone_ids[i]) << model::ExitMeasureName(measures[i]);
    std::vector<int> layers;
    for (const engine::TokenOutput& t : together[i]->tokens()) layers.push_back(t.exit_layer);
    EXPECT_EQ(layers, alone_layers[i]) << model::ExitMeasureName(measures[i]);
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
  // Threshold 1 never exits: same tokens as without.
  const auto [one_layers, one_ids] = layers_of(1.0f, true);
  EXPECT_EQ(one_ids, off_ids);
  for (int l : one_layers) EXPECT_EQ(l, depth);
  // No threshold means the model's calibrated one, and this model has none: refused, naming
  // the measure, rather than silently served at full depth.
  GenerateOptions uncalibrated = Greedy("The same prompt. ", 16);
  uncalibrated.early_exit.enabled = true;
  Collector refused;
  const absl::Status s = scheduler_->SubmitGenerate(uncalibrated, refused.stream());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "early_exit.threshold")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "softmax")) << s;
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
