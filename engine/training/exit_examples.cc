#include "engine/training/exit_examples.h"

#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "engine/model/exit_confidence.h"
#include "engine/model/transformer.h"

namespace mnemo::training {
namespace {

constexpr int64_t kEvalChunk = 8192;  // examples per classifier call when evaluating

// Mean BCE of probabilities `p` against `y` (both [n] float32), clamped away from 0 and 1.
double MeanBce(const torch::Tensor& p, const torch::Tensor& y) {
  torch::Tensor q = p.clamp(1e-7, 1 - 1e-7);
  return -(y * q.log() + (1 - y) * (1 - q).log()).mean().item<double>();
}

}  // namespace

absl::StatusOr<ExitExamples> CollectExitExamples(model::Model& model,
                                                 const model::ExitClassifierImpl& classifier,
                                                 absl::Span<const int> tokens, double keep,
                                                 uint64_t seed) {
  const model::ModelConfig& config = model.config();
  if (config.n_layers < 2) {
    return absl::InvalidArgumentError("a one-layer model has no layer to exit early after");
  }
  if (tokens.empty()) return absl::InvalidArgumentError("no tokens to collect examples from");
  for (int id : tokens) {
    if (id < 0 || id >= config.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is outside the vocabulary"));
    }
  }
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution take(std::clamp(keep, 0.0, 1.0));
  std::vector<torch::Tensor> features, labels, softmax, saturation;  // per segment
  try {
    c10::InferenceMode inference;
    model::TransformerImpl& net = *model.transformer();
    memory::SessionMemory memory = model.NewMemory();
    const int exitable = config.n_layers - 1;
    const int64_t n = static_cast<int64_t>(tokens.size());
    for (int64_t start = 0; start < n; start += config.seg_len) {
      const int64_t length = std::min<int64_t>(config.seg_len, n - start);
      std::vector<int64_t> ids(tokens.begin() + start, tokens.begin() + start + length);
      torch::Tensor input = torch::tensor(ids, torch::kInt64).view({1, length}).to(model.device());
      std::vector<torch::Tensor> outputs;  // n_layers x [1, S, d]
      net.forward(input, memory, &outputs);
      std::vector<int64_t> kept;
      for (int64_t s = 0; s < length; ++s) {
        if (keep >= 1.0 || take(rng)) kept.push_back(s);
      }
      if (kept.empty()) continue;
      torch::Tensor rows = torch::tensor(kept, torch::kInt64).to(model.device());
      auto pick = [&](const torch::Tensor& t) { return t[0].index_select(0, rows); };  // [K, ...]
      torch::Tensor full_argmax = net.Logits(pick(outputs.back())).argmax(-1);         // [K]
      torch::Tensor previous = pick(net.Embed(input));                                 // [K, d]
      std::vector<torch::Tensor> f, l, sr, sat;
      for (int i = 0; i < exitable; ++i) {
        torch::Tensor h = pick(outputs[i]);  // [K, d]
        l.push_back(net.Logits(h).argmax(-1).eq(full_argmax));
        sr.push_back(model::ExitConfidence(model::ExitMeasure::kSoftmaxResponse, net, nullptr, i, h,
                                           previous));
        sat.push_back(model::ExitConfidence(model::ExitMeasure::kHiddenSaturation, net, nullptr, i,
                                            h, previous));
        f.push_back(classifier.Features(h));
        previous = h;
      }
      features.push_back(torch::stack(f, 1).to(torch::kCPU, torch::kBFloat16));  // [K, L-1, d]
      labels.push_back(torch::stack(l, 1).to(torch::kCPU, torch::kFloat32));     // [K, L-1]
      softmax.push_back(torch::stack(sr, 1).to(torch::kCPU, torch::kFloat32));
      saturation.push_back(torch::stack(sat, 1).to(torch::kCPU, torch::kFloat32));
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("collecting exit examples failed: ", e.what_without_backtrace()));
  }
  // Outside inference mode: normal tensors the fit may use with autograd on.
  ExitExamples out;
  const int exitable = config.n_layers - 1;
  if (features.empty()) {
    out.features = torch::zeros({0, exitable, config.d_model}, torch::kBFloat16);
    out.labels = torch::zeros({0, exitable});
    out.softmax = torch::zeros({0, exitable});
    out.saturation = torch::zeros({0, exitable});
    return out;
  }
  out.features = torch::cat(features, 0).clone();
  out.labels = torch::cat(labels, 0).clone();
  out.softmax = torch::cat(softmax, 0).clone();
  out.saturation = torch::cat(saturation, 0).clone();
  return out;
}

ExitExamples ConcatExitExamples(const std::vector<ExitExamples>& parts) {
  std::vector<torch::Tensor> f, l, sr, sat;
  for (const ExitExamples& p : parts) {
    if (p.size() == 0) continue;
    f.push_back(p.features);
    l.push_back(p.labels);
    sr.push_back(p.softmax);
    sat.push_back(p.saturation);
  }
  ExitExamples out;
  if (f.empty()) return parts.empty() ? out : parts.front();
  out.features = torch::cat(f, 0);
  out.labels = torch::cat(l, 0);
  out.softmax = torch::cat(sr, 0);
  out.saturation = torch::cat(sat, 0);
  return out;
}

double FitExitClassifier(model::ExitClassifierImpl& classifier, const ExitExamples& train,
                         const ExitFitOptions& options, const ExitFitProgress& progress) {
  const int64_t n = train.size();
  if (n == 0) return 0.0;
  classifier.train();
  torch::optim::Adam optimizer(classifier.parameters(), torch::optim::AdamOptions(options.lr));
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(options.seed);
  const int64_t batch = std::max(1, options.batch);
  const int64_t batches = (n + batch - 1) / batch;
  double epoch_bce = 0.0;
  for (int epoch = 0; epoch < options.epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng);
    double bce_sum = 0.0;
    int64_t seen = 0;
    for (int64_t b = 0; b < batches; ++b) {
      const int64_t begin = b * batch, size = std::min(batch, n - begin);
      torch::Tensor index = torch::from_blob(order.data() + begin, {size}, torch::kInt64);
      torch::Tensor x = train.features.index_select(0, index).to(torch::kFloat32);  // [b, L-1, d]
      torch::Tensor y = train.labels.index_select(0, index);                        // [b, L-1]
      torch::Tensor logits = classifier.AllLayerLogits(x);
      torch::Tensor bce = torch::binary_cross_entropy_with_logits(logits, y);
      torch::Tensor loss =
          bce + options.l2 * classifier.weight().pow(2).sum() / std::max<int64_t>(n, 1);
      optimizer.zero_grad();
      loss.backward();
      optimizer.step();
      bce_sum += bce.item<double>() * static_cast<double>(size);
      seen += size;
      if (progress) {
        progress((epoch + static_cast<double>(b + 1) / batches) / options.epochs,
                 bce_sum / static_cast<double>(seen));
      }
    }
    epoch_bce = bce_sum / static_cast<double>(std::max<int64_t>(seen, 1));
  }
  classifier.eval();
  return epoch_bce;
}

double RocAuc(const torch::Tensor& scores, const torch::Tensor& labels) {
  torch::Tensor s = scores.to(torch::kCPU, torch::kFloat64).contiguous();
  torch::Tensor y = labels.to(torch::kCPU, torch::kFloat64).contiguous();
  const int64_t n = s.numel();
  const double* sv = s.data_ptr<double>();
  const double* yv = y.data_ptr<double>();
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return sv[a] < sv[b]; });
  // Mann–Whitney: the positives' rank sum, ties given their average rank.
  double positive_rank_sum = 0.0;
  int64_t positives = 0;
  for (int64_t i = 0; i < n;) {
    int64_t j = i;
    while (j < n && sv[order[j]] == sv[order[i]]) ++j;
    const double rank = 0.5 * static_cast<double>(i + 1 + j);  // mean of ranks i+1..j
    for (int64_t k = i; k < j; ++k) {
      if (yv[order[k]] > 0.5) {
        positive_rank_sum += rank;
        ++positives;
      }
    }
    i = j;
  }
  const int64_t negatives = n - positives;
  if (positives == 0 || negatives == 0) return 0.5;
  const double p = static_cast<double>(positives);
  return (positive_rank_sum - p * (p + 1) / 2) / (p * static_cast<double>(negatives));
}

std::vector<double> PositiveRates(const ExitExamples& examples) {
  std::vector<double> rates;
  if (examples.size() == 0) return rates;
  torch::Tensor mean = examples.labels.mean(0).to(torch::kFloat64).contiguous();
  rates.assign(mean.data_ptr<double>(), mean.data_ptr<double>() + mean.numel());
  return rates;
}

std::vector<ExitLayerMetrics> EvaluateExitClassifier(const model::ExitClassifierImpl& classifier,
                                                     const ExitExamples& examples,
                                                     absl::Span<const double> base_rates) {
  std::vector<ExitLayerMetrics> metrics;
  const int64_t n = examples.size();
  if (n == 0) return metrics;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> parts;
  for (int64_t start = 0; start < n; start += kEvalChunk) {
    torch::Tensor x = examples.features.narrow(0, start, std::min(kEvalChunk, n - start));
    parts.push_back(torch::sigmoid(classifier.AllLayerLogits(x.to(torch::kFloat32))));
  }
  torch::Tensor p = torch::cat(parts, 0);  // [N, L-1]
  for (int64_t i = 0; i < examples.labels.size(1); ++i) {
    torch::Tensor y = examples.labels.select(1, i);
    torch::Tensor pi = p.select(1, i);
    ExitLayerMetrics m;
    m.layer = static_cast<int>(i) + 1;
    m.examples = n;
    m.positive_rate = y.mean().item<double>();
    m.accuracy = pi.ge(0.5).to(torch::kFloat32).eq(y).to(torch::kFloat32).mean().item<double>();
    m.bce = MeanBce(pi, y);
    const double base =
        static_cast<size_t>(i) < base_rates.size() ? base_rates[i] : m.positive_rate;
    m.base_bce = MeanBce(torch::full_like(pi, base), y);
    m.auc = RocAuc(pi, y);
    m.softmax_auc = RocAuc(examples.softmax.select(1, i), y);
    m.saturation_auc = RocAuc(examples.saturation.select(1, i), y);
    metrics.push_back(m);
  }
  return metrics;
}

}  // namespace mnemo::training
