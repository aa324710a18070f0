// Exit examples: what the CALM exit classifier (model/exit_classifier.h) learns from, and how
// well a confidence measure predicts it.
//
// One example per text position and exitable layer i (the first n_layers - 1): the layer's
// hidden state, normalised as the classifier reads it, and CALM's consistency label, 1 when
// the greedy token of layer i through the shared head equals the full model's greedy token at
// that position. The model runs at full depth, teacher-forced, from a fresh memory per text
// with the model's default memory (every memory kind on), as the server feeds a new session.
// Also kept, to compare measures on the same positions: layer i's softmax response and hidden
// saturation.
//
// Pure functions over a borrowed Model (loop-thread rules as Model's); the fit is
// deterministic given its seed.
#ifndef MNEMO_ENGINE_TRAINING_EXIT_EXAMPLES_H_
#define MNEMO_ENGINE_TRAINING_EXIT_EXAMPLES_H_

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/model/exit_classifier.h"
#include "engine/model/model.h"

namespace mnemo::training {

struct ExitExamples {
  torch::Tensor features;    // [N, L-1, d_model] bfloat16 CPU: ExitClassifierImpl::Features(h_i)
  torch::Tensor labels;      // [N, L-1] float32 CPU, 1 = layer i's argmax equals the full model's
  torch::Tensor softmax;     // [N, L-1] float32 CPU: softmax response (top-1 - top-2) at layer i
  torch::Tensor saturation;  // [N, L-1] float32 CPU: cos(h_i, h_{i-1})

  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

// Examples at every position of `tokens` ([BOS, b0, ...], any length >= 1), or at a random
// `keep` fraction of them (seeded; 1 = all). `classifier` only supplies the normalisation.
absl::StatusOr<ExitExamples> CollectExitExamples(model::Model& model,
                                                 const model::ExitClassifierImpl& classifier,
                                                 absl::Span<const int> tokens, double keep = 1.0,
                                                 uint64_t seed = 1);

// Rows of all parts, in order.
ExitExamples ConcatExitExamples(const std::vector<ExitExamples>& parts);

struct ExitFitOptions {
  int epochs = 40;
  int batch = 512;
  double lr = 3e-3;   // Adam
  double l2 = 1e-4;   // penalty on the weights (not the biases), per example
  uint64_t seed = 1;  // minibatch order
};

// (fraction done, mean training BCE of the last epoch so far)
using ExitFitProgress = std::function<void(double fraction, double bce)>;

// Minimises mean binary cross-entropy (plus the L2 penalty) over every layer of `train`,
// from the classifier's current parameters; the model is not involved (frozen by
// construction). Returns the final epoch's mean training BCE.
double FitExitClassifier(model::ExitClassifierImpl& classifier, const ExitExamples& train,
                         const ExitFitOptions& options, const ExitFitProgress& progress = nullptr);

// How well confidences predict the labels on one layer's examples.
struct ExitLayerMetrics {
  int layer = 0;  // 1-based layer the token would leave after
  int64_t examples = 0;
  double positive_rate = 0.0;   // share of examples whose label is 1
  double accuracy = 0.0;        // classifier, deciding at 0.5
  double bce = 0.0;             // classifier's mean binary cross-entropy (nats)
  double base_bce = 0.0;        // predicting `base_rate` everywhere (the best constant)
  double auc = 0.0;             // classifier's ROC AUC (0.5 = chance)
  double softmax_auc = 0.0;     // softmax response's ROC AUC on the same examples
  double saturation_auc = 0.0;  // hidden saturation's ROC AUC on the same examples
};

// Per layer: the classifier against `examples`' labels; base_rates[i] (e.g. the training
// positive rate of layer i) is the constant the base BCE predicts.
std::vector<ExitLayerMetrics> EvaluateExitClassifier(const model::ExitClassifierImpl& classifier,
                                                     const ExitExamples& examples,
                                                     absl::Span<const double> base_rates);

// Positive rate of each layer's labels: [L-1].
std::vector<double> PositiveRates(const ExitExamples& examples);

// ROC AUC of `scores` for binary `labels` (both [N]); ties count half. 0.5 when one class is
// absent.
double RocAuc(const torch::Tensor& scores, const torch::Tensor& labels);

}  // namespace mnemo::training

#endif  // MNEMO_ENGINE_TRAINING_EXIT_EXAMPLES_H_
