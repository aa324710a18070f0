#include "engine/model/exit_confidence.h"

#include <c10/util/Exception.h>

#include "engine/model/host_confidence.h"
#include "engine/model/transformer.h"

namespace mnemo::model {

torch::Tensor ExitConfidence(ExitMeasure measure,
                             absl::FunctionRef<torch::Tensor(const torch::Tensor&)> head,
                             const ExitClassifierImpl* classifier, int layer,
                             const torch::Tensor& output, const torch::Tensor& input) {
  switch (measure) {
    case ExitMeasure::kSoftmaxResponse: {
      torch::Tensor logits = head(output);
      if (SoftmaxResponseOnHost(logits)) return SoftmaxResponse(logits);  // one pass per row
      torch::Tensor top2 = std::get<0>(torch::softmax(logits, -1).topk(2, -1));
      return top2.select(-1, 0) - top2.select(-1, 1);
    }
    case ExitMeasure::kHiddenSaturation:
      return torch::cosine_similarity(output, input, /*dim=*/-1);
    case ExitMeasure::kClassifier:
      TORCH_CHECK(classifier != nullptr, "the classifier exit measure needs an exit classifier");
      return classifier->Confidence(output, layer);
  }
  TORCH_CHECK(false, "unknown exit measure");
}

torch::Tensor ExitConfidence(ExitMeasure measure, TransformerImpl& net,
                             const ExitClassifierImpl* classifier, int layer,
                             const torch::Tensor& output, const torch::Tensor& input) {
  return ExitConfidence(
      measure, [&net](const torch::Tensor& hidden) { return net.Logits(hidden); }, classifier,
      layer, output, input);
}

}  // namespace mnemo::model
