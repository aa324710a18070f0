// snapshot_fuzz: a session as the server reads it back, from an ImportSession call or from
// --session_dir: engine/session/session_snapshot.cc (DecodeSnapshotMeta, DecodeSnapshot,
// FrameCutShort, ReadFrame, ApplyLogRecord) and everything they read through
// util::BinaryReader (engine/util/binary_io.cc): the session memory's pieces and deltas
// (engine/memory/session_memory_io.cc), its kNN store with FAISS IVF indexes (engine/knn), the
// recall history and the private datastore (engine/datastore).
//
// Input: [flags byte][snapshot][log records]. The snapshot is a file as EncodeSnapshot writes
// it (magic, version, sections up to the end section); the records follow it, each a frame as
// EncodeLogRecord writes it (a session log without its magic and header frame).
//   flags bit 0:    before decoding, set every frame's CRC-32C to match its bytes, so that
//                   mutations reach the section parsers instead of stopping at the checksum
//                   (clear: the bytes as given);
//   flags bits 1-2: the memory shape the "server" makes sessions with (snapshot_shapes.h); a
//                   snapshot of another shape is refused like another model's.
// The steps are ImportSession's (Scheduler::Answer(ImportSessionCall): the meta, the size
// caps, DecodeSnapshot), then SessionJournal::Load's replay of the records.
//
// FAISS: the kNN store's IVF indexes travel as FAISS blobs, and faiss::read_index trusts its
// input (it sizes vectors from counts in the blob before reading them). IvfHeadIndex::
// Deserialize walks the blob's layout first (engine/knn/ivf_blob_check.h), so that reaches
// FAISS only with every count within the bytes that follow; this target found the need for it.
//
// Checks:
//   - errors are DATA_LOSS or FAILED_PRECONDITION (session_snapshot.h), and no exception
//     escapes (a c10::Error would end the scheduler's loop thread, and with it the server);
//   - a session that decodes (and every record applied to it) encodes to a snapshot that
//     decodes again and then encodes to the same bytes;
//   - the restored session works: its memory can be cloned and marked and takes a position,
//     its kNN store searches, its recall history answers a query and takes a token, its
//     datastore searches.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/session/session_snapshot.h"
#include "engine/util/binary_io.h"
#include "fuzz/fuzz_support.h"
#include "fuzz/snapshot_shapes.h"

namespace mnemo::fuzz {
namespace {

constexpr size_t kHeader = 8 + 4;           // magic, format version
constexpr size_t kFrameHeader = 4 + 8 + 4;  // tag, length, CRC-32C
constexpr uint32_t kRecordTag = 2;          // session_journal.cc's log record tag

// Sets the CRC of every frame from `pos` on that fits in `bytes`.
void FixChecksums(std::string& bytes, size_t pos) {
  while (bytes.size() - pos >= kFrameHeader) {
    uint32_t tag = 0;
    int64_t length = 0;
    std::memcpy(&tag, bytes.data() + pos, 4);
    std::memcpy(&length, bytes.data() + pos + 4, 8);
    if (length < 0 || static_cast<uint64_t>(length) > bytes.size() - pos - kFrameHeader) return;
    const absl::string_view payload(bytes.data() + pos + kFrameHeader, static_cast<size_t>(length));
    const uint32_t crc = util::Crc32c(
        payload, util::Crc32c(absl::string_view(reinterpret_cast<const char*>(&tag), 4)));
    std::memcpy(bytes.data() + pos + 12, &crc, 4);
    pos += kFrameHeader + static_cast<size_t>(length);
  }
}

void CheckError(const absl::Status& status, absl::string_view step) {
  Note(absl::StrCat(step, ": ", status.ToString()));
  FUZZ_CHECK(status.ok() || absl::IsDataLoss(status) || absl::IsFailedPrecondition(status),
             absl::StrCat(step, ": ", status.ToString()));
}

// Where the snapshot at the start of `bytes` ends (after its end section), or 0 when its
// frames do not lead to one.
size_t SnapshotEnd(absl::string_view bytes) {
  if (bytes.size() < kHeader) return 0;
  size_t pos = kHeader;
  while (true) {
    absl::StatusOr<session::Frame> frame = session::ReadFrame(bytes, &pos, "fuzz: section");
    if (!frame.ok()) return 0;
    if (frame->tag == 0) return pos;
  }
}

void CheckRoundTrip(const session::Session& decoded, int variant) {
  const std::string encoded = session::EncodeSnapshot(decoded, kSnapshotModelId, 1);
  absl::StatusOr<std::unique_ptr<session::Session>> again = session::DecodeSnapshot(
      encoded, kSnapshotModelId,
      [variant](int64_t knn_len) { return NewSnapshotMemory(variant, knn_len); });
  FUZZ_CHECK(again.ok(), absl::StrCat("a decoded session re-encodes to a snapshot that does "
                                      "not decode: ", again.status().ToString()));
  FUZZ_CHECK(session::EncodeSnapshot(**again, kSnapshotModelId, 1) == encoded,
             "a decoded session does not encode to the same bytes twice");
}

// What the next request on an imported session does first: its memory takes a position (and
// the kNN store searches its window), its history a token, its datastore a query.
void UseSession(session::Session& session) {
  memory::SessionMemory clone = session.state.memory.Clone();
  const session::LogMark mark = session::MarkSession(session);
  FUZZ_CHECK(session::CanLogSince(session, mark), "a session cannot log since its own mark");
  (void)clone.bytes();
  memory::SessionMemory& memory = session.state.memory;
  Feed(memory, 1, [](std::vector<int64_t> sizes) { return torch::full(sizes, 0.25f); });
  const int knn_layer = memory.shape().knn_layer;
  const knn::KnnMemory* store = knn_layer >= 0 ? memory.layer(knn_layer).knn_store() : nullptr;
  if (store != nullptr) {
    const int64_t heads = memory.shape().heads, d = memory.shape().d_head;
    const torch::Tensor query = torch::full({heads, 1, d}, 1.0f / std::sqrt(float(d)));
    const absl::StatusOr<knn::KnnResult> hits =
        store->Search(query, 4, torch::full({1}, store->oldest_position(), torch::kInt64),
                      torch::full({1}, store->next_position(), torch::kInt64));
    FUZZ_CHECK(hits.ok(), absl::StrCat("a restored kNN store cannot search its window: ",
                                       hits.status().ToString()));
  }
  if (session.state.history != nullptr) {
    (void)session.state.history->Query();
    session.state.history->Append(7, 1);
    (void)session.state.history->Query();
  }
  if (session.datastore != nullptr && session.datastore->d() <= 4096) {
    const torch::Tensor query = torch::ones({1, session.datastore->d()}, torch::kFloat32);
    const auto hits = session.datastore->Search(query, datastore::SearchOptions{});
    FUZZ_CHECK(hits.ok(),
               absl::StrCat("a restored datastore cannot search: ", hits.status().ToString()));
  }
}

void Run(std::string bytes) {
  const int variant = (static_cast<uint8_t>(bytes[0]) >> 1) & 3;
  const bool fix_checksums = (bytes[0] & 1) != 0;
  bytes.erase(0, 1);
  if (fix_checksums && bytes.size() >= kHeader) FixChecksums(bytes, kHeader);

  absl::StatusOr<session::SnapshotMeta> meta = session::DecodeSnapshotMeta(bytes);
  CheckError(meta.status(), "DecodeSnapshotMeta");
  if (!meta.ok() || meta->knn_len > kMaxKnnLen || meta->remember_capacity > kMaxRememberCapacity) {
    return;
  }
  const size_t end = SnapshotEnd(bytes);
  if (end == 0) return;
  const absl::string_view snapshot = absl::string_view(bytes).substr(0, end);
  absl::StatusOr<std::unique_ptr<session::Session>> decoded = session::DecodeSnapshot(
      snapshot, kSnapshotModelId,
      [variant](int64_t knn_len) { return NewSnapshotMemory(variant, knn_len); });
  CheckError(decoded.status(), "DecodeSnapshot");
  if (!decoded.ok()) return;
  session::Session& session = **decoded;
  CheckRoundTrip(session, variant);

  // The log, as SessionJournal::Load replays it: a record cut short at the end is dropped.
  size_t pos = end;
  while (pos < bytes.size() && !session::FrameCutShort(bytes, pos)) {
    absl::StatusOr<session::Frame> record = session::ReadFrame(bytes, &pos, "record");
    CheckError(record.status(), "ReadFrame");
    if (!record.ok() || record->tag != kRecordTag) return;
    const absl::Status applied = session::ApplyLogRecord(record->payload, session);
    CheckError(applied, "ApplyLogRecord");
    if (!applied.ok()) return;
    CheckRoundTrip(session, variant);
  }
  UseSession(session);
  Note(absl::StrCat("restored and used a session of ", session.state.memory.next_position(),
                    " positions"));
}

}  // namespace
}  // namespace mnemo::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  at::set_num_threads(1);  // one thread, as the scheduler's loop decodes
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  mnemo::fuzz::Run(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
