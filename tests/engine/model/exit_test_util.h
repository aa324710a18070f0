// Helpers for early-exit tests on tiny random models, whose confidences sit on very different
// scales per measure (softmax responses near 0, saturations near 1): thresholds are picked
// from the measured confidences rather than fixed.
#ifndef MNEMO_TESTS_ENGINE_MODEL_EXIT_TEST_UTIL_H_
#define MNEMO_TESTS_ENGINE_MODEL_EXIT_TEST_UTIL_H_

#include <c10/core/InferenceMode.h>
#include <torch/types.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "engine/model/exit_classifier.h"
#include "engine/model/exit_confidence.h"
#include "engine/model/model.h"

namespace mnemo::testing {

// Random classifier weights large enough that its confidences spread over (0, 1).
inline model::ExitClassifier RandomExitClassifier(const model::ModelConfig& c, uint64_t seed) {
  model::ExitClassifier classifier(c.n_layers - 1, c.d_model, c.layer_norm_eps);
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  classifier->weight().normal_(0.0, 0.4);
  classifier->bias().normal_(0.0, 0.5);
  return classifier;
}

// `measure`'s confidences after the first layer at every position of a full-depth pass over
// `tokens` from an empty memory, sorted.
inline std::vector<float> FirstLayerConfidences(model::Model& model, model::ExitMeasure measure,
                                                const std::vector<int>& tokens) {
  c10::InferenceMode guard;
  memory::SessionMemory memory = model.NewMemory();
  std::vector<float> out;
  const size_t seg = static_cast<size_t>(model.config().seg_len);
  for (size_t start = 0; start < tokens.size(); start += seg) {
    std::vector<int64_t> ids(tokens.begin() + start,
                             tokens.begin() + std::min(tokens.size(), start + seg));
    torch::Tensor input = torch::tensor(ids).view({1, -1});
    std::vector<torch::Tensor> outputs;
    model.transformer()->forward(input, memory, &outputs);
    torch::Tensor c = model::ExitConfidence(measure, *model.transformer(), model.exit_classifier(),
                                            0, outputs[0], model.transformer()->Embed(input))
                          .view(-1)
                          .contiguous();
    out.insert(out.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A threshold at quantile q of `sorted` that equals no confidence: halfway between two
// neighbours, so float rounding (which differs between batch shapes) cannot flip a decision.
inline float Quantile(const std::vector<float>& sorted, double q) {
  const size_t k =
      std::min(sorted.size() - 2, static_cast<size_t>(q * static_cast<double>(sorted.size() - 1)));
  return 0.5f * (sorted[k] + sorted[k + 1]);
}

// The threshold (among quantiles of the first-layer confidences) at which ForwardWithExit
// exits about half of `tokens` early.
inline float HalfExitThreshold(model::Model& model, model::ExitMeasure measure,
                               const std::vector<int>& tokens) {
  const std::vector<float> confidences = FirstLayerConfidences(model, measure, tokens);
  float best = Quantile(confidences, 0.5);
  int best_gap = 1 << 30;
  for (double q = 0.05; q < 1.0; q += 0.05) {
    const float candidate = Quantile(confidences, q);
    memory::SessionMemory memory = model.NewMemory();
    auto trial = model.ForwardWithExit(tokens, memory, candidate, measure);
    if (!trial.ok()) continue;
    int early = 0;
    for (int layer : trial->exit_layers) early += layer < model.config().n_layers;
    const int gap = std::abs(early - static_cast<int>(tokens.size()) / 2);
    if (gap < best_gap) {
      best_gap = gap;
      best = candidate;
    }
  }
  return best;
}

}  // namespace mnemo::testing

#endif  // MNEMO_TESTS_ENGINE_MODEL_EXIT_TEST_UTIL_H_
