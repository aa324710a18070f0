// The kNN-LM (λ, T) sweep over held-out files: a fixed validation/test split of the files,
// per-split totals for every grid pair, and the pair chosen on validation only.
//
// Plain data and pure functions; thread-compatible.
#ifndef MNEMO_ENGINE_EVAL_KNN_LM_SWEEP_H_
#define MNEMO_ENGINE_EVAL_KNN_LM_SWEEP_H_

#include <cstddef>
#include <vector>

#include "engine/eval/knn_lm_scorer.h"

namespace mnemo::eval {

// Indices into the scored documents (corpus order, i.e. the sorted held-out list).
struct HeldOutSplit {
  std::vector<size_t> validation;  // documents 0, 2, 4, ...: tune λ and T
  std::vector<size_t> test;        // documents 1, 3, 5, ...: report
};

// Alternating split, so the two halves are disjoint, deterministic, of equal count (±1) and
// spread over the whole sorted list (both sides see every directory of a sorted corpus). A
// single document goes to validation and leaves the test side empty.
HeldOutSplit SplitValidationTest(size_t documents);

struct KnnLmSweep {
  KnnLmGrid grid;
  std::vector<KnnLmTotals> files;  // [documents], corpus order
  HeldOutSplit split;
  KnnLmTotals validation;          // sum over split.validation
  KnnLmTotals test;                // sum over split.test
  size_t chosen = 0;               // grid pair with the lowest validation bpb (first on ties)
};

// Fills split, the two sums and `chosen` from the per-file totals.
KnnLmSweep SummarizeSweep(const KnnLmGrid& grid, std::vector<KnnLmTotals> files);

}  // namespace mnemo::eval

#endif  // MNEMO_ENGINE_EVAL_KNN_LM_SWEEP_H_
