// Exit confidences computed on the host, one pass per row.
//
// SoftmaxResponse: CALM's softmax-response confidence (top-1 minus top-2 probability) from
// logits, in one pass per row on the host. The same value as softmax(logits).topk(2) followed
// by a subtraction, without the four LibTorch ops (and their allocations) per exit test: at one
// decode row an exit test costs about as much as the layer work it saves otherwise.
//
//   p1 - p2 = (1 - exp(l2 - l1)) / sum_j exp(l_j - l1)      (l1 >= l2 the two largest logits)
//
// Stateless and thread-safe.
#ifndef MNEMO_ENGINE_MODEL_HOST_CONFIDENCE_H_
#define MNEMO_ENGINE_MODEL_HOST_CONFIDENCE_H_

#include <torch/types.h>

namespace mnemo::model {

// Whether SoftmaxResponse takes these logits: float32 on the CPU, at least 2 classes, outside
// autograd.
bool SoftmaxResponseOnHost(const torch::Tensor& logits);

// logits [..., V] -> [...] float32: top-1 minus top-2 softmax probability of each row.
torch::Tensor SoftmaxResponse(const torch::Tensor& logits);

// The exit classifier's confidence (exit_classifier.h), sigmoid(w . LayerNorm(h) + b) with a
// layer norm without affine parameters, in one pass per row (double sums): its LibTorch ops
// (layer_norm, matmul, add, sigmoid) cost more than the arithmetic at a few decode rows.
//
// Whether ClassifierConfidence takes `hidden`: float32 on the CPU, outside autograd.
bool ClassifierConfidenceOnHost(const torch::Tensor& hidden);

// hidden [..., d] -> [...] float32; weight: d floats; bias and eps: the classifier's.
torch::Tensor ClassifierConfidence(const torch::Tensor& hidden, const float* weight, float bias,
                                   float eps);

}  // namespace mnemo::model

#endif  // MNEMO_ENGINE_MODEL_HOST_CONFIDENCE_H_
