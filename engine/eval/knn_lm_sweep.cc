#include "engine/eval/knn_lm_sweep.h"

#include <utility>

namespace mnemo::eval {

HeldOutSplit SplitValidationTest(size_t documents) {
  HeldOutSplit split;
  for (size_t i = 0; i < documents; ++i) {
    (i % 2 == 0 ? split.validation : split.test).push_back(i);
  }
  return split;
}

KnnLmSweep SummarizeSweep(const KnnLmGrid& grid, std::vector<KnnLmTotals> files) {
  KnnLmSweep sweep;
  sweep.grid = grid;
  sweep.files = std::move(files);
  sweep.split = SplitValidationTest(sweep.files.size());
  sweep.validation.logprob.assign(grid.size(), 0.0);
  sweep.test.logprob.assign(grid.size(), 0.0);
  for (size_t i : sweep.split.validation) sweep.validation.Add(sweep.files[i]);
  for (size_t i : sweep.split.test) sweep.test.Add(sweep.files[i]);
  for (size_t p = 1; p < grid.size(); ++p) {
    if (sweep.validation.Bpb(p) < sweep.validation.Bpb(sweep.chosen)) sweep.chosen = p;
  }
  return sweep;
}

}  // namespace mnemo::eval
