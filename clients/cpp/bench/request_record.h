// RequestRecord: what the bench measured for one Generate request. Plain data.
//
// Times are seconds on the steady clock since the level's origin (the start of its measured
// phase; warmup requests have negative times and are never aggregated).
#ifndef MNEMO_CLIENTS_CPP_BENCH_REQUEST_RECORD_H_
#define MNEMO_CLIENTS_CPP_BENCH_REQUEST_RECORD_H_

#include <cstdint>
#include <string>
#include <vector>

#include <grpcpp/support/status.h>

#include "mnemo/v1/generation.pb.h"

namespace mnemo::bench {

// A streamed chunk that carried at least one token.
struct ChunkArrival {
  double time_s = 0;
  int tokens = 0;
};

struct RequestRecord {
  double start_s = 0;  // just before the call was started (the request is sent from here)
  double end_s = 0;    // the stream's final status arrived
  std::vector<ChunkArrival> chunks;  // in arrival order; chunks without tokens are left out
  int output_tokens = 0;             // tokens received, summed over chunks
  // exit_layer_counts[l] = tokens whose exit_layer was l (index 0: the server sent none).
  std::vector<int64_t> exit_layer_counts;
  // From the last chunk's usage (0 when the stream failed before it).
  int usage_prompt_tokens = 0;
  int usage_generated_tokens = 0;
  v1::FinishReason finish_reason = v1::FINISH_REASON_UNSPECIFIED;
  grpc::StatusCode code = grpc::StatusCode::OK;
  std::string message;  // the status message when code != OK

  bool ok() const { return code == grpc::StatusCode::OK; }
};

}  // namespace mnemo::bench

#endif  // MNEMO_CLIENTS_CPP_BENCH_REQUEST_RECORD_H_
