// SchedulerTest: a Scheduler over a tiny random model, with blocking helpers around its
// callback API. Shared by the scheduler and score tests.
#ifndef MNEMO_TESTS_ENGINE_SCHEDULER_SCHEDULER_FIXTURE_H_
#define MNEMO_TESTS_ENGINE_SCHEDULER_SCHEDULER_FIXTURE_H_

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/scheduler/scheduler.h"
#include "gtest/gtest.h"
#include "tests/engine/scheduler/test_util.h"

namespace mnemo::scheduler {

using engine::FinishReason;
using engine::GenerateFinal;
using engine::GenerateOptions;
using engine::ScoreOptions;
using engine::ScoreResult;
using engine::SessionInfo;
using testing::Collector;
using testing::EventLog;
using testing::Waiter;

inline SchedulerConfig TestConfig() {
  SchedulerConfig config;
  config.sweep_interval = absl::Milliseconds(10);
  config.model_name = "tiny";
  return config;
}

inline GenerateOptions Greedy(std::string prompt, int max_new_tokens, std::string session = "") {
  GenerateOptions options;
  options.session_id = std::move(session);
  options.prompt = std::move(prompt);
  options.max_new_tokens = max_new_tokens;
  options.sampling.temperature = 0;
  return options;
}

// Greedy decoding by hand with a second copy of the model (same seed, same weights): feeds
// `input`, then up to `n` argmax tokens (BOS/PAD masked), stopping before EOS.
inline std::vector<int> ManualGreedy(std::vector<int> input, int n) {
  std::unique_ptr<model::Model> model = testing::TinyModel();
  memory::SessionMemory memory = model->NewMemory();
  std::vector<int> out;
  for (int step = 0; step < n; ++step) {
    absl::StatusOr<torch::Tensor> logprobs = model->Forward(input, memory, model::Outputs::kLast);
    EXPECT_TRUE(logprobs.ok()) << logprobs.status();
    if (!logprobs.ok()) break;
    torch::Tensor lp = (*logprobs)[0].clone();  // [vocab]
    lp[model::kBosId] = -INFINITY;
    lp[model::kPadId] = -INFINITY;
    const int id = static_cast<int>(lp.argmax().item<int64_t>());
    if (id == model::kEosId) break;
    out.push_back(id);
    input = {id};
  }
  return out;
}

// Rewires a tiny model's output so that EOS is by far the most likely next token everywhere:
// the final norm outputs a constant along a (much enlarged) EOS embedding row, which the tied
// LM head turns into a dominant EOS logit. Returns false if the parameters are not found.
inline bool MakeEosLikely(model::Model& model) {
  torch::NoGradGuard no_grad;
  auto params = model.transformer()->named_parameters();
  if (!params.contains("embedding.weight") || !params.contains("final_norm.weight") ||
      !params.contains("final_norm.bias")) {
    return false;
  }
  torch::Tensor embedding = params["embedding.weight"];  // [vocab, d_model]
  embedding[model::kEosId].mul_(50.0);
  torch::Tensor eos = embedding[model::kEosId];  // [d_model]
  params["final_norm.weight"].zero_();
  params["final_norm.bias"].copy_(eos / eos.norm());
  return true;
}

class SchedulerTest : public ::testing::Test {
 protected:
  void Start(SchedulerConfig config = TestConfig(),
             std::unique_ptr<model::Model> model = testing::TinyModel()) {
    scheduler_ = std::make_unique<Scheduler>(std::move(config), std::move(model));
  }
  SessionInfo CreateSession(const std::string& id) {
    Waiter<absl::StatusOr<SessionInfo>> w;
    scheduler_->CreateSession({id, 0}, w.Callback());
    absl::StatusOr<SessionInfo> info = w.Wait();
    EXPECT_TRUE(info.ok()) << info.status();
    return info.value_or(SessionInfo());
  }
  absl::StatusOr<SessionInfo> GetSession(const std::string& id) {
    Waiter<absl::StatusOr<SessionInfo>> w;
    scheduler_->GetSession(id, w.Callback());
    return w.Wait();
  }
  absl::StatusOr<ScoreResult> Score(const std::string& session, const std::string& text,
                                    bool update_memory, bool token_logprobs = false,
                                    engine::RecallRequest recall = {}) {
    Waiter<absl::StatusOr<ScoreResult>> w;
    ScoreOptions options;
    options.session_id = session;
    options.text = text;
    options.update_memory = update_memory;
    options.token_logprobs = token_logprobs;
    options.recall = recall;
    scheduler_->SubmitScore(options, w.Callback());
    return w.Wait();
  }
  GenerateFinal Run(GenerateOptions options, Collector& collector) {
    absl::Status s = scheduler_->SubmitGenerate(std::move(options), collector.stream());
    EXPECT_TRUE(s.ok()) << s;
    std::optional<GenerateFinal> final = collector.Wait();
    EXPECT_TRUE(final.has_value());
    return final.value_or(GenerateFinal());
  }

  std::unique_ptr<Scheduler> scheduler_;
};


}  // namespace mnemo::scheduler

#endif  // MNEMO_TESTS_ENGINE_SCHEDULER_SCHEDULER_FIXTURE_H_
