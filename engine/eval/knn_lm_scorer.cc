#include "engine/eval/knn_lm_scorer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace mnemo::eval {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// log(exp(a) + exp(b)) without NaN when either side is -inf.
double LogAddExp(double a, double b) {
  if (a == kNegInf) return b;
  if (b == kNegInf) return a;
  const double m = std::max(a, b);
  return m + std::log1p(std::exp(-std::abs(a - b)));
}

absl::Status CheckGrid(const KnnLmGrid& grid) {
  if (grid.size() == 0) {
    return absl::InvalidArgumentError("kNN-LM grid needs at least one lambda and temperature");
  }
  for (float lambda : grid.lambdas) {
    if (!(lambda >= 0.0f && lambda <= 1.0f)) {
      return absl::InvalidArgumentError(absl::StrCat("kNN-LM lambda ", lambda,
                                                     " is outside [0, 1]"));
    }
  }
  for (float t : grid.temperatures) {
    if (!(t > 0.0f)) {
      return absl::InvalidArgumentError(absl::StrCat("kNN-LM temperature ", t, " must be > 0"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

double KnnLmTotals::Bpb(size_t pair) const {
  return lm.bytes == 0 ? 0.0 : -logprob[pair] / std::log(2.0) / static_cast<double>(lm.bytes);
}

void KnnLmTotals::Add(const KnnLmTotals& other) {
  lm.Add(other.lm);
  if (logprob.size() < other.logprob.size()) logprob.resize(other.logprob.size(), 0.0);
  for (size_t p = 0; p < other.logprob.size(); ++p) logprob[p] += other.logprob[p];
  queries += other.queries;
  hits += other.hits;
  nearest_distance += other.nearest_distance;
  kth_distance += other.kth_distance;
  forward_seconds += other.forward_seconds;
  search_seconds += other.search_seconds;
}

double MixTargetLogProb(double lm_logprob, double log_knn, float lambda) {
  if (lambda == 0.0f) return lm_logprob;
  const double a = log_knn == kNegInf ? kNegInf : std::log(double{lambda}) + log_knn;
  const double b = (lambda == 1.0f || lm_logprob == kNegInf)
                       ? kNegInf
                       : std::log1p(-double{lambda}) + lm_logprob;
  return LogAddExp(a, b);
}

double KnnTargetLogProb(const std::vector<datastore::Hit>& hits, int target, float temperature) {
  double norm = kNegInf;
  double match = kNegInf;
  for (const datastore::Hit& hit : hits) {
    const double logit = -static_cast<double>(hit.distance) / temperature;
    norm = LogAddExp(norm, logit);
    if (hit.value == target) match = LogAddExp(match, logit);
  }
  if (match == kNegInf || norm == kNegInf) return kNegInf;
  return match - norm;
}

absl::StatusOr<KnnLmTotals> ScoreWithKnnLm(model::Model& model, const datastore::Datastore& store,
                                           std::string_view document,
                                           const KnnLmScoreOptions& options) {
  if (absl::Status s = CheckGrid(options.grid); !s.ok()) return s;
  if (store.d() != model.config().d_model) {
    return absl::InvalidArgumentError(absl::StrCat("datastore keys have d ", store.d(),
                                                   ", the model's d_model is ",
                                                   model.config().d_model));
  }
  const KnnLmGrid& grid = options.grid;
  const size_t n_t = grid.temperatures.size();
  const std::vector<int> inputs = DocumentInputs(document);
  memory::SessionMemory memory = model.NewMemory(options.memory);
  const size_t chunk = static_cast<size_t>(std::max(1, options.score.chunk));
  KnnLmTotals totals;
  totals.logprob.assign(grid.size(), 0.0);
  std::vector<double> chunk_logprob(grid.size());
  std::vector<double> log_knn(n_t);
  for (size_t start = 0; start < inputs.size(); start += chunk) {
    const size_t n = std::min(chunk, inputs.size() - start);
    auto t0 = Clock::now();
    torch::Tensor keys;  // [n, d]
    absl::StatusOr<torch::Tensor> logprobs =  // [n, vocab]
        model.Forward(absl::MakeConstSpan(inputs).subspan(start, n), memory, model::Outputs::kAll,
                      &keys);
    if (!logprobs.ok()) return logprobs.status();
    totals.forward_seconds += SecondsSince(t0);
    if (logprobs->dim() != 2 || logprobs->size(0) != static_cast<int64_t>(n) ||
        logprobs->size(1) < 256 || keys.dim() != 2 || keys.size(0) != static_cast<int64_t>(n)) {
      return absl::InternalError(absl::StrCat("model returned log-probs/keys of unexpected shape "
                                              "for ", n, " tokens"));
    }
    t0 = Clock::now();
    absl::StatusOr<std::vector<std::vector<datastore::Hit>>> hits =
        store.Search(keys.to(torch::kFloat32).contiguous(), options.search);
    if (!hits.ok()) return hits.status();
    totals.search_seconds += SecondsSince(t0);

    const torch::Tensor lp = logprobs->to(torch::kCPU, torch::kFloat32).contiguous();
    auto a = lp.accessor<float, 2>();
    // Summed per chunk, then into the totals: the same arithmetic as ScoreWithMemory, so λ = 0
    // reproduces its bpb bit for bit.
    double chunk_lm = 0.0;
    std::fill(chunk_logprob.begin(), chunk_logprob.end(), 0.0);
    for (size_t i = 0; i < n; ++i) {
      const int target = static_cast<unsigned char>(document[start + i]);
      const float lm = a[static_cast<int64_t>(i)][target];
      chunk_lm += lm;
      const std::vector<datastore::Hit>& row = (*hits)[i];
      if (!row.empty()) {
        totals.hits += static_cast<int64_t>(row.size());
        totals.nearest_distance += row.front().distance;
        totals.kth_distance += row.back().distance;
      }
      for (size_t t = 0; t < n_t; ++t) {
        log_knn[t] = KnnTargetLogProb(row, target, grid.temperatures[t]);
      }
      for (size_t p = 0; p < grid.size(); ++p) {
        const float lambda = row.empty() ? 0.0f : grid.lambda(p);
        chunk_logprob[p] += MixTargetLogProb(lm, log_knn[p % n_t], lambda);
      }
    }
    totals.lm.logprob += chunk_lm;
    for (size_t p = 0; p < grid.size(); ++p) totals.logprob[p] += chunk_logprob[p];
    totals.lm.bytes += static_cast<int64_t>(n);
    totals.queries += static_cast<int64_t>(n);
    if (options.score.on_progress) options.score.on_progress(static_cast<int64_t>(n));
  }
  totals.lm.layers = totals.lm.bytes * model.config().n_layers;
  return totals;
}

absl::StatusOr<SearchLatency> MeasureSearchLatency(model::Model& model,
                                                   const datastore::Datastore& store,
                                                   std::string_view document, int queries,
                                                   const KnnLmScoreOptions& options) {
  const std::vector<int> all = DocumentInputs(document);
  const size_t n = std::min(all.size(), static_cast<size_t>(std::max(1, queries)));
  if (n == 0) return absl::InvalidArgumentError("search latency needs a non-empty document");
  memory::SessionMemory memory = model.NewMemory(options.memory);
  torch::Tensor keys;  // [n, d]
  absl::StatusOr<torch::Tensor> logprobs = model.Forward(
      absl::MakeConstSpan(all).subspan(0, n), memory, model::Outputs::kAll, &keys);
  if (!logprobs.ok()) return logprobs.status();
  keys = keys.to(torch::kFloat32).contiguous();

  SearchLatency out;
  out.queries = static_cast<int>(n);
  std::vector<double> us;
  us.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const torch::Tensor one = keys.narrow(0, static_cast<int64_t>(i), 1).contiguous();  // [1, d]
    const auto t0 = Clock::now();
    absl::StatusOr<std::vector<std::vector<datastore::Hit>>> hits =
        store.Search(one, options.search);
    if (!hits.ok()) return hits.status();
    us.push_back(SecondsSince(t0) * 1e6);
  }
  double sum = 0;
  for (double u : us) sum += u;
  out.single_mean_us = sum / static_cast<double>(n);
  std::sort(us.begin(), us.end());
  out.single_p50_us = us[n / 2];
  out.single_p99_us = us[std::min(n - 1, (n * 99) / 100)];
  const auto t0 = Clock::now();
  absl::StatusOr<std::vector<std::vector<datastore::Hit>>> hits = store.Search(keys, options.search);
  if (!hits.ok()) return hits.status();
  out.batched_us_per_query = SecondsSince(t0) * 1e6 / static_cast<double>(n);
  return out;
}

}  // namespace mnemo::eval
