// The CALM exit rule (docs/design.md §5), in one place for solo decode
// (Transformer::ForwardWithExit, a tensor of tokens at once) and batched decode (BatchDecoder, row
// by row): after a layer other than the last, a token still in the network leaves when its
// confidence (exit_confidence.h) reaches its threshold, confidence >= threshold. Confidences lie
// in [0, 1], so a threshold > 1 never exits; nor does a NaN confidence. Plain functions; any
// thread.
#ifndef MNEMO_ENGINE_MODEL_EXIT_RULE_H_
#define MNEMO_ENGINE_MODEL_EXIT_RULE_H_

#include <torch/types.h>

namespace mnemo::model {

// Whether a token with `confidence` after a (non-last) layer exits there.
inline bool ExitsEarly(float confidence, float threshold) { return confidence >= threshold; }

// The same rule for every element of `confidence` ([...] float): bool [...].
inline torch::Tensor ExitsEarly(const torch::Tensor& confidence, float threshold) {
  return confidence.ge(threshold);
}

// Whether a row can exit early at all, so that its confidence is worth computing: a threshold
// <= 1, and no kNN-LM key wanted (the key is the last layer's, BatchDecoder's DecodeRow).
inline bool MayExitEarly(float threshold, bool wants_knn_lm_key) {
  return threshold <= 1.0f && !wants_knn_lm_key;
}

}  // namespace mnemo::model

#endif  // MNEMO_ENGINE_MODEL_EXIT_RULE_H_
