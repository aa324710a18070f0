// The durable form of a session (docs/durability.md): a snapshot file holds the whole session,
// a log holds one record per call that changed it since.
//
// Snapshot: magic "MNEMOSNP", format version, then sections, each [tag u32][length i64]
// [CRC-32C u32][payload], ending with the end tag:
//   meta      model id, session id, snapshot generation, create/last-use times, the kNN and
//             recall capacities the session was made with
//   state     tokens_seen, last_exit_layer, last_logprobs, last_knn_lm_key
//   memory    memory::SessionMemory::WriteTo (every piece ForEachPiece lists)
//   history   the recall index (datastore::HistoryIndex::WriteTo), if any
//   datastore the private kNN-LM datastore (datastore::SessionDatastore::WriteTo), if any
// Log record payload: the call kind, the token count fed, the state section, the memory delta
// since the previous record (memory::SessionMemory::WriteDeltaSince), the tokens appended to
// the recall history, and the last-use time. Applying a snapshot's records in order rebuilds
// the session exactly as it was when the last one was written: deltas carry what the calls
// wrote, so restoring needs no model work and does not depend on how calls were batched.
//
// Thread-compatible functions; the caller owns the session while they run.
#ifndef MNEMO_ENGINE_SESSION_SESSION_SNAPSHOT_H_
#define MNEMO_ENGINE_SESSION_SESSION_SNAPSHOT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/memory/session_memory.h"
#include "engine/session/session.h"

namespace mnemo::session {

inline constexpr uint32_t kSnapshotFormatVersion = 1;

// What a snapshot says about itself before its state is read.
struct SnapshotMeta {
  std::string model_id;
  std::string session_id;
  int64_t generation = 0;
  absl::Time create_time;
  absl::Time last_use_time;
  int64_t knn_len = 0;            // the memory's MemoryShape::knn_len
  int64_t remember_capacity = 0;  // 0 = no recall history
  absl::Duration ttl = absl::ZeroDuration();
  bool pinned = false;
};

// What a restore needs to rebuild a session: a fresh memory for `knn_len` (the shape's kNN
// window; the scheduler's session memory factory).
using NewMemoryFn = std::function<memory::SessionMemory(int64_t knn_len)>;

std::string EncodeSnapshot(const Session& session, absl::string_view model_id,
                           int64_t generation);
// Reads only the meta section (cheap: listing, checking the model).
absl::StatusOr<SnapshotMeta> DecodeSnapshotMeta(absl::string_view bytes);
// DATA_LOSS for damaged bytes (truncated, bad checksum, impossible values), FAILED_PRECONDITION
// for a snapshot of another model (`model_id` differs) or memory shape.
absl::StatusOr<std::unique_ptr<Session>> DecodeSnapshot(absl::string_view bytes,
                                                        absl::string_view model_id,
                                                        const NewMemoryFn& new_memory,
                                                        SnapshotMeta* meta = nullptr);

// Where the last log record left a session: what the next record is a delta from.
struct LogMark {
  memory::SessionMemory::Mark memory;
  int64_t history_appended = 0;
};
LogMark MarkSession(const Session& session);
// False when a record cannot express the change since `mark` (CanDelta, or the recall history
// wrapped past what was appended since); write a snapshot instead.
bool CanLogSince(const Session& session, const LogMark& mark);

// The call a log record comes from. A datastore addition changes what records do not carry
// (the private datastore): SessionJournal::Commit writes a snapshot for it instead.
enum class CallKind : uint8_t { kGenerate = 1, kScore = 2, kDatastore = 3 };
// The record, framed with `tag` (AppendFrame's layout), built in one buffer: a record is
// ~16 KB per token fed on the bundled model, so it is not copied again.
std::string EncodeLogRecord(const Session& session, const LogMark& mark, CallKind kind,
                            int64_t tokens_fed, uint32_t tag);
// Applies one record's payload to a session equal to the one its mark was taken from.
absl::Status ApplyLogRecord(absl::string_view payload, Session& session);

// Framing shared by snapshot sections and log records: [tag][length][crc][payload].
void AppendFrame(std::string& out, uint32_t tag, absl::string_view payload);
struct Frame {
  uint32_t tag = 0;
  absl::string_view payload;
};
// True when the bytes from `pos` on are shorter than the frame they begin (its header, or the
// payload length the header announces): a frame cut short, e.g. a log's last record torn by a
// crash while it was appended.
bool FrameCutShort(absl::string_view bytes, size_t pos);
// The frame at `*pos`, advancing it. DATA_LOSS naming `what` when it is cut short or its
// checksum does not match.
absl::StatusOr<Frame> ReadFrame(absl::string_view bytes, size_t* pos, absl::string_view what);

}  // namespace mnemo::session

#endif  // MNEMO_ENGINE_SESSION_SESSION_SNAPSHOT_H_
