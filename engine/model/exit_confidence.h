// ExitConfidence: the CALM confidence of hidden states leaving a layer, for each ExitMeasure.
// One definition shared by Model::ForwardWithExit (TransformerImpl::ForwardWithExit) and
// BatchDecoder, so solo and batched decoding make the same exit decisions.
//
// Stateless; borrows the head (and classifier) for the call. Any thread that runs the model.
#ifndef MNEMO_ENGINE_MODEL_EXIT_CONFIDENCE_H_
#define MNEMO_ENGINE_MODEL_EXIT_CONFIDENCE_H_

#include <torch/types.h>

#include "absl/functional/function_ref.h"
#include "engine/model/exit_classifier.h"
#include "engine/model/exit_measure.h"

namespace mnemo::model {

class TransformerImpl;

// Confidence that the hidden states leaving 0-based layer `layer` (< n_layers - 1) may exit:
// output [..., d_model] is the layer's output, input [..., d_model] its input (read only by
// kHiddenSaturation; may be undefined otherwise). Returns [...]:
//   kSoftmaxResponse  top-1 minus top-2 probability of the shared head on `output`
//   kHiddenSaturation cos(output, input)
//   kClassifier       classifier->Confidence(output, layer); `classifier` must be set.
// `head` is the family's shared exit head (Network::Logits: [..., d_model] -> [..., vocab]).
torch::Tensor ExitConfidence(ExitMeasure measure,
                             absl::FunctionRef<torch::Tensor(const torch::Tensor&)> head,
                             const ExitClassifierImpl* classifier, int layer,
                             const torch::Tensor& output, const torch::Tensor& input);
// The same with the native network's head (TransformerImpl::Logits).
torch::Tensor ExitConfidence(ExitMeasure measure, TransformerImpl& net,
                             const ExitClassifierImpl* classifier, int layer,
                             const torch::Tensor& output, const torch::Tensor& input);

}  // namespace mnemo::model

#endif  // MNEMO_ENGINE_MODEL_EXIT_CONFIDENCE_H_
