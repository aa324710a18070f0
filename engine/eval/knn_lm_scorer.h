// Scoring one document with a model plus a kNN-LM datastore (docs/design.md §4) over a grid of
// (λ, T) pairs, from ONE forward pass and ONE datastore search per chunk.
//
// Per chunk: Model::Forward returns the LM log-probs and the kNN-LM keys; Datastore::Search
// finds the k nearest entries of every key once; every (λ, T) pair is then evaluated on those
// same hits. Only the log-probability of the true next byte is needed for bpb, so each pair
// costs O(k) per byte instead of the O(V) of datastore::KnnLmLogProbs; the two agree (tested).
// The byte convention is scorer.h's (byte i predicted after [BOS, bytes 0..i-1]).
//
// Borrows the model and the datastore for the call; the model is not thread-safe.
#ifndef MNEMO_ENGINE_EVAL_KNN_LM_SCORER_H_
#define MNEMO_ENGINE_EVAL_KNN_LM_SCORER_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/datastore/datastore.h"
#include "engine/eval/scorer.h"
#include "engine/model/model.h"

namespace mnemo::eval {

// Every λ crossed with every T; pair p = (lambdas[p / T count], temperatures[p % T count]).
struct KnnLmGrid {
  std::vector<float> lambdas;       // each in [0, 1]
  std::vector<float> temperatures;  // each > 0, squared-L2 units of the keys
  size_t size() const { return lambdas.size() * temperatures.size(); }
  float lambda(size_t pair) const { return lambdas[pair / temperatures.size()]; }
  float temperature(size_t pair) const { return temperatures[pair % temperatures.size()]; }
};

struct KnnLmScoreOptions {
  model::MemoryOptions memory;   // the session memory the keys are computed with
  datastore::SearchOptions search;
  KnnLmGrid grid;
  ScoreOptions score;            // chunk and progress, as for ScoreWithMemory
};

// One document (or a sum over documents).
struct KnnLmTotals {
  ScoreTotals lm;               // the model alone, from the same forward pass
  std::vector<double> logprob;  // [grid.size()]: Σ log p over the bytes with pair p
  int64_t queries = 0;          // datastore searches (= bytes)
  int64_t hits = 0;             // neighbours returned over all queries
  double nearest_distance = 0;  // Σ over queries of the nearest hit's squared L2
  double kth_distance = 0;      // Σ over queries of the farthest (k-th) hit's squared L2
  double forward_seconds = 0;
  double search_seconds = 0;

  double Bpb(size_t pair) const;  // bits per byte with pair p
  void Add(const KnnLmTotals& other);
};

// log p(target) under p = λ·p_kNN + (1-λ)·p_LM with p_kNN(y) ∝ Σ_{hits with value y} exp(-d/T).
// `log_knn` is log p_kNN(target) (-inf when no hit has that value). λ = 0 returns lm_logprob
// exactly; a row without hits should pass λ = 0 (there is no kNN distribution).
double MixTargetLogProb(double lm_logprob, double log_knn, float lambda);

// log p_kNN(target) from `hits` at temperature T; -inf if no hit carries `target` or there
// are no hits.
double KnnTargetLogProb(const std::vector<datastore::Hit>& hits, int target, float temperature);

// The whole document through one memory (options.memory), in chunks of options.score.chunk.
// INVALID_ARGUMENT for an empty grid, λ outside [0, 1] or T <= 0; the datastore's d must be
// the model's d_model.
absl::StatusOr<KnnLmTotals> ScoreWithKnnLm(model::Model& model, const datastore::Datastore& store,
                                           std::string_view document,
                                           const KnnLmScoreOptions& options);

// Search latency on real keys: the first `queries` positions of `document` are run through the
// model (options.memory), then searched one query at a time and all at once.
struct SearchLatency {
  int queries = 0;
  double single_mean_us = 0;  // one Search call per query
  double single_p50_us = 0;
  double single_p99_us = 0;
  double batched_us_per_query = 0;  // one Search call for all queries
};
absl::StatusOr<SearchLatency> MeasureSearchLatency(model::Model& model,
                                                   const datastore::Datastore& store,
                                                   std::string_view document, int queries,
                                                   const KnnLmScoreOptions& options);

}  // namespace mnemo::eval

#endif  // MNEMO_ENGINE_EVAL_KNN_LM_SCORER_H_
