#include "engine/training/document_batcher.h"

#include <algorithm>
#include <numeric>

#include "engine/model/model_config.h"
#include "engine/util/files.h"

namespace mnemo::training {

DocumentBatcher::DocumentBatcher(std::vector<corpus::CorpusFile> files, int batch, int seg_len,
                                 uint64_t seed)
    : files_(std::move(files)), seg_len_(seg_len) {
  for (int r = 0; r < batch; ++r) {
    Row row;
    row.rng.seed(seed * 1000003 + r);
    rows_.push_back(std::move(row));
  }
}

int DocumentBatcher::epoch() const {
  int slowest = rows_.empty() ? 0 : rows_[0].epoch;
  for (const Row& row : rows_) slowest = std::min(slowest, row.epoch);
  return slowest;
}

absl::Status DocumentBatcher::StartDocument(Row& row) {
  if (row.next_file >= row.order.size()) {
    if (!row.order.empty()) ++row.epoch;
    row.order.resize(files_.size());
    std::iota(row.order.begin(), row.order.end(), 0);
    std::shuffle(row.order.begin(), row.order.end(), row.rng);
    row.next_file = 0;
  }
  const corpus::CorpusFile& file = files_[row.order[row.next_file++]];
  absl::StatusOr<std::string> text = util::ReadFile(file.path);
  if (!text.ok()) return text.status();
  row.tokens.clear();
  row.tokens.reserve(text->size() + 2);
  row.tokens.push_back(model::kBosId);
  for (unsigned char c : *text) row.tokens.push_back(c);
  row.tokens.push_back(model::kEosId);
  row.offset = 0;
  return absl::OkStatus();
}

absl::StatusOr<Batch> DocumentBatcher::Next() {
  const int64_t batch = static_cast<int64_t>(rows_.size());
  Batch out;
  out.inputs = torch::full({batch, seg_len_}, model::kPadId, torch::kInt64);
  out.targets = torch::full({batch, seg_len_}, -1, torch::kInt64);
  auto inputs = out.inputs.accessor<int64_t, 2>();
  auto targets = out.targets.accessor<int64_t, 2>();
  for (int64_t r = 0; r < batch; ++r) {
    Row& row = rows_[r];
    // A document is done once every target (all but its last token as input) has been used.
    if (row.tokens.empty() || row.offset + 1 >= row.tokens.size()) {
      if (absl::Status s = StartDocument(row); !s.ok()) return s;
      out.new_document.push_back(static_cast<int>(r));
    }
    const size_t available = row.tokens.size() - 1 - row.offset;
    const size_t n = std::min<size_t>(seg_len_, available);
    for (size_t i = 0; i < n; ++i) {
      inputs[r][i] = row.tokens[row.offset + i];
      targets[r][i] = row.tokens[row.offset + i + 1];
    }
    out.tokens += static_cast<int64_t>(n);
    row.offset += n;
  }
  return out;
}

}  // namespace mnemo::training
