// DocumentBatcher: turns training files into the batches mnemo-train consumes.
//
// Each of `batch` rows streams its own shuffled sequence of documents, one segment of seg_len
// tokens per step, in order, so memory carries across the segments of a document. A document
// is [BOS, bytes..., EOS]; its last segment is padded (targets -1 = ignored) and the next
// document starts at the next segment with that row's memory reset. Deterministic in the seed.
// Not thread-safe.
#ifndef MNEMO_ENGINE_TRAINING_DOCUMENT_BATCHER_H_
#define MNEMO_ENGINE_TRAINING_DOCUMENT_BATCHER_H_

#include <torch/types.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/corpus/corpus.h"

namespace mnemo::training {

struct Batch {
  torch::Tensor inputs;        // [batch, seg_len] int64 token ids (PAD after a document ends)
  torch::Tensor targets;       // [batch, seg_len] int64 next-token ids, -1 = no loss
  std::vector<int> new_document;  // rows whose memory must be reset before this segment
  int64_t tokens = 0;          // targets that count (not -1)
};

class DocumentBatcher {
 public:
  DocumentBatcher(std::vector<corpus::CorpusFile> files, int batch, int seg_len, uint64_t seed);

  absl::StatusOr<Batch> Next();

  // Epochs completed by the slowest row.
  int epoch() const;

 private:
  struct Row {
    std::mt19937_64 rng;
    std::vector<size_t> order;  // shuffled file indices of the current epoch
    size_t next_file = 0;       // index into order
    int epoch = 0;
    std::vector<int> tokens;    // the current document [BOS, bytes..., EOS]
    size_t offset = 0;          // next input position in tokens
  };

  absl::Status StartDocument(Row& row);

  const std::vector<corpus::CorpusFile> files_;
  const int seg_len_;
  std::vector<Row> rows_;
};

}  // namespace mnemo::training

#endif  // MNEMO_ENGINE_TRAINING_DOCUMENT_BATCHER_H_
