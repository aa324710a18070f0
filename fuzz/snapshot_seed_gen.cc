// snapshot_seed_gen: writes fuzz/corpus/snapshot_fuzz/ with the real encoder (EncodeSnapshot,
// EncodeLogRecord), from sessions whose memories were written the way a model writes them
// (SegmentWrite), so that every seed is a snapshot the server itself could have made.
//
// Usage: snapshot_seed_gen OUT_DIR (scripts/fuzz.sh --make-seeds runs it). Deterministic: the
// same build writes the same files.
//
// Seeds, each [flags][snapshot][records] (snapshot_fuzz.cc), for the shapes of
// snapshot_shapes.h:
//   fresh-N     a session nothing was fed, shape N;
//   fed-N       a session fed 10 positions, with a recall history, defined state tensors and a
//               private datastore; then two records, each for one more segment;
//   ivf-0       a kNN store past its exact threshold (IVF indexes in the snapshot), then a
//               record whose entries carry IVF list ids;
//   other-shape fed-0's bytes decoded with shape 3 (FAILED_PRECONDITION).
#include <c10/core/InferenceMode.h>
#include <torch/types.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "engine/datastore/history_index.h"
#include "engine/datastore/session_datastore.h"
#include "engine/session/session_snapshot.h"
#include "fuzz/snapshot_shapes.h"

namespace mnemo::fuzz {
namespace {

void FeedPositions(session::Session& session, int64_t positions) {
  const int64_t seg_len = session.state.memory.shape().seg_len;
  for (int64_t done = 0; done < positions;) {
    const int64_t length = std::min(seg_len, positions - done);
    Feed(session.state.memory, length,
         [](std::vector<int64_t> sizes) { return torch::randn(sizes); });
    if (session.state.history != nullptr) {
      for (int64_t p = 0; p < length; ++p) {
        session.state.history->Append(static_cast<int>((done + p) * 37 % 259), 1);
      }
    }
    session.state.tokens_seen += length;
    done += length;
  }
  session.state.last_exit_layer = session.state.memory.shape().layers;
  session.state.last_logprobs = torch::log_softmax(torch::randn({259}), 0);
  session.state.last_knn_lm_key = torch::randn({session.state.memory.shape().d_head});
}

std::unique_ptr<session::Session> NewSession(int variant, int64_t knn_len, bool extras) {
  auto session = std::make_unique<session::Session>();
  session->id = "seed-session";
  session->create_time = absl::FromUnixSeconds(1700000000);
  session->last_use_time = absl::FromUnixSeconds(1700000100);
  session->ttl = absl::Seconds(600);
  session->state.memory = NewSnapshotMemory(variant, knn_len);
  if (extras) {
    session->state.history = std::make_unique<datastore::HistoryIndex>(64);
    session->datastore = std::make_unique<datastore::SessionDatastore>(4, 128);
    const absl::Status added =
        session->datastore->Append(torch::randn({3, 4}), std::vector<int32_t>{5, 6, 7});
    if (!added.ok()) std::abort();
  }
  return session;
}

// The snapshot of `session`, then one record per entry of `segments` (positions fed first).
std::string Seed(uint8_t flags, session::Session& session, const std::vector<int64_t>& segments) {
  std::string out(1, static_cast<char>(flags));
  out += session::EncodeSnapshot(session, kSnapshotModelId, 3);
  for (int64_t positions : segments) {
    const session::LogMark mark = session::MarkSession(session);
    FeedPositions(session, positions);
    session.last_use_time += absl::Seconds(1);
    if (!session::CanLogSince(session, mark)) std::abort();
    out += session::EncodeLogRecord(session, mark, session::CallKind::kGenerate, positions,
                                    /*tag=*/2);
  }
  return out;
}

void Write(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::ofstream out(dir + "/" + name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  std::printf("%s: %zu bytes\n", name.c_str(), bytes.size());
}

uint8_t Flags(int variant) { return static_cast<uint8_t>(1 | (variant << 1)); }

}  // namespace
}  // namespace mnemo::fuzz

int main(int argc, char** argv) {
  using namespace mnemo::fuzz;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  torch::manual_seed(20240601);
  for (int variant = 0; variant < 3; ++variant) {
    auto fresh = NewSession(variant, 0, /*extras=*/false);
    Write(dir, "fresh-" + std::to_string(variant), Seed(Flags(variant), *fresh, {}));
    // Shape 1 keeps sinks: the first record is written while they are still filling.
    auto fed = NewSession(variant, 24, /*extras=*/true);
    FeedPositions(*fed, variant == 1 ? 1 : 10);
    const std::string bytes = Seed(Flags(variant), *fed, {4, 3});
    Write(dir, "fed-" + std::to_string(variant), bytes);
    if (variant == 0) Write(dir, "other-shape", std::string(1, Flags(3)) + bytes.substr(1));
  }
  auto ivf = NewSession(0, 40, /*extras=*/false);
  FeedPositions(*ivf, 48);
  Write(dir, "ivf-0", Seed(Flags(0), *ivf, {4}));
  return 0;
}
