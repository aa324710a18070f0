// Ingest: feeds real text into a session memory up to a history length, the way a client's
// long prompt arrives (Model::Forward in chunks, segments of seg_len inside), printing progress
// with an ETA to stderr.
#ifndef MNEMO_TOOLS_DECODE_BENCH_INGEST_H_
#define MNEMO_TOOLS_DECODE_BENCH_INGEST_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "engine/memory/session_memory.h"
#include "engine/model/model.h"
#include "tools/decode_bench/text_source.h"

namespace mnemo::tools {

struct IngestOptions {
  int64_t chunk = 4096;           // tokens per Model::Forward call
  double progress_seconds = 10;   // at most one progress line per this many seconds
  std::string label;              // prefix of the progress lines
};

// Feeds `text` until memory.next_position() reaches `target` (nothing if it already has).
// Returns the seconds taken.
absl::StatusOr<double> Ingest(model::Model& model, memory::SessionMemory& memory,
                              TextSource& text, int64_t target, const IngestOptions& options);

}  // namespace mnemo::tools

#endif  // MNEMO_TOOLS_DECODE_BENCH_INGEST_H_
