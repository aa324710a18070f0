#include "engine/session/session_snapshot.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/util/binary_io.h"
#include "engine/util/status_macros.h"

namespace mnemo::session {
namespace {

constexpr char kMagic[8] = {'M', 'N', 'E', 'M', 'O', 'S', 'N', 'P'};
constexpr int64_t kFrameHeader = 4 + 8 + 4;

enum Section : uint32_t {
  kEnd = 0,
  kMeta = 1,
  kState = 2,
  kMemory = 3,
  kHistory = 4,
  kDatastore = 5,
};

const char* SectionName(uint32_t tag) {
  switch (tag) {
    case kMeta: return "meta";
    case kState: return "state";
    case kMemory: return "memory";
    case kHistory: return "history";
    case kDatastore: return "datastore";
    default: return "unknown";
  }
}

void WriteState(const SequenceState& state, util::BinaryWriter& out) {
  out.I64(state.tokens_seen);
  out.I64(state.last_exit_layer);
  out.Tensor(state.last_logprobs);
  out.Tensor(state.last_knn_lm_key);
}

absl::Status ReadState(util::BinaryReader& in, SequenceState& state) {
  MNEMO_ASSIGN_OR_RETURN(const int64_t tokens_seen, in.Count("tokens_seen", int64_t{1} << 62));
  MNEMO_ASSIGN_OR_RETURN(const int64_t exit_layer, in.Count("last_exit_layer", 1 << 20));
  MNEMO_ASSIGN_OR_RETURN(torch::Tensor logprobs, in.NewTensor("last_logprobs"));
  MNEMO_ASSIGN_OR_RETURN(torch::Tensor key, in.NewTensor("last_knn_lm_key"));
  if ((logprobs.defined() && (logprobs.dim() != 1 || logprobs.scalar_type() != torch::kFloat32)) ||
      (key.defined() && (key.dim() != 1 || key.scalar_type() != torch::kFloat32))) {
    return absl::DataLossError("state: last_logprobs or last_knn_lm_key of the wrong shape");
  }
  state.tokens_seen = tokens_seen;
  state.last_exit_layer = static_cast<int>(exit_layer);
  state.last_logprobs = std::move(logprobs);
  state.last_knn_lm_key = std::move(key);
  return absl::OkStatus();
}

std::string Section(uint32_t tag, const std::function<void(util::BinaryWriter&)>& write) {
  util::BinaryWriter w;
  write(w);
  std::string out;
  AppendFrame(out, tag, w.data());
  return out;
}

absl::StatusOr<SnapshotMeta> ReadMeta(absl::string_view payload) {
  util::BinaryReader in(payload);
  SnapshotMeta meta;
  MNEMO_ASSIGN_OR_RETURN(meta.model_id, in.Bytes("meta model"));
  MNEMO_ASSIGN_OR_RETURN(meta.session_id, in.Bytes("meta session id"));
  MNEMO_ASSIGN_OR_RETURN(meta.generation, in.I64("meta generation"));
  MNEMO_ASSIGN_OR_RETURN(const int64_t created, in.I64("meta create time"));
  MNEMO_ASSIGN_OR_RETURN(const int64_t used, in.I64("meta last use time"));
  MNEMO_ASSIGN_OR_RETURN(meta.knn_len, in.Count("meta knn_len", int64_t{1} << 30));
  MNEMO_ASSIGN_OR_RETURN(meta.remember_capacity,
                         in.Count("meta remember_capacity", int64_t{1} << 34));
  MNEMO_ASSIGN_OR_RETURN(const int64_t ttl, in.Count("meta ttl", int64_t{1} << 62));
  MNEMO_ASSIGN_OR_RETURN(const uint8_t pinned, in.U8("meta pinned"));
  MNEMO_RETURN_IF_ERROR(util::ExpectEnd(in, "meta"));
  meta.ttl = absl::Nanoseconds(ttl);
  meta.pinned = pinned != 0;
  meta.create_time = absl::FromUnixNanos(created);
  meta.last_use_time = absl::FromUnixNanos(used);
  return meta;
}

absl::StatusOr<SnapshotMeta> CheckHeaderAndReadMeta(absl::string_view bytes, size_t* pos) {
  if (bytes.size() < sizeof(kMagic) + 4 || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError("not a mnemo session snapshot (bad magic or truncated header)");
  }
  uint32_t version = 0;
  std::memcpy(&version, bytes.data() + sizeof(kMagic), 4);
  if (version != kSnapshotFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "snapshot format version ", version, ", this server reads version ",
        kSnapshotFormatVersion));
  }
  *pos = sizeof(kMagic) + 4;
  MNEMO_ASSIGN_OR_RETURN(Frame meta, ReadFrame(bytes, pos, "meta section"));
  if (meta.tag != kMeta) return absl::DataLossError("snapshot: the meta section is missing");
  return ReadMeta(meta.payload);
}

}  // namespace

void AppendFrame(std::string& out, uint32_t tag, absl::string_view payload) {
  const int64_t length = static_cast<int64_t>(payload.size());
  const uint32_t crc = util::Crc32c(payload, util::Crc32c(absl::string_view(
                                                 reinterpret_cast<const char*>(&tag), 4)));
  out.append(reinterpret_cast<const char*>(&tag), 4);
  out.append(reinterpret_cast<const char*>(&length), 8);
  out.append(reinterpret_cast<const char*>(&crc), 4);
  out.append(payload.data(), payload.size());
}

bool FrameCutShort(absl::string_view bytes, size_t pos) {
  const size_t left = bytes.size() - pos;
  if (left < static_cast<size_t>(kFrameHeader)) return true;
  int64_t length = 0;
  std::memcpy(&length, bytes.data() + pos + 4, 8);
  return length < 0 || static_cast<uint64_t>(length) > left - kFrameHeader;
}

absl::StatusOr<Frame> ReadFrame(absl::string_view bytes, size_t* pos, absl::string_view what) {
  if (FrameCutShort(bytes, *pos)) {
    return absl::DataLossError(absl::StrCat(what, ": truncated (", bytes.size() - *pos,
                                            " bytes left, fewer than the frame needs)"));
  }
  Frame frame;
  int64_t length = 0;
  uint32_t crc = 0;
  std::memcpy(&frame.tag, bytes.data() + *pos, 4);
  std::memcpy(&length, bytes.data() + *pos + 4, 8);
  std::memcpy(&crc, bytes.data() + *pos + 12, 4);
  frame.payload = bytes.substr(*pos + kFrameHeader, static_cast<size_t>(length));
  const uint32_t actual = util::Crc32c(
      frame.payload, util::Crc32c(absl::string_view(reinterpret_cast<const char*>(&frame.tag), 4)));
  if (actual != crc) {
    return absl::DataLossError(absl::StrCat(what, ": checksum mismatch (the bytes were damaged)"));
  }
  *pos += kFrameHeader + static_cast<size_t>(length);
  return frame;
}

std::string EncodeSnapshot(const Session& session, absl::string_view model_id,
                           int64_t generation) {
  const SequenceState& state = session.state;
  std::string out(kMagic, sizeof(kMagic));
  out.append(reinterpret_cast<const char*>(&kSnapshotFormatVersion), 4);
  out += Section(kMeta, [&](util::BinaryWriter& w) {
    w.Bytes(model_id);
    w.Bytes(session.id);
    w.I64(generation);
    w.I64(absl::ToUnixNanos(session.create_time));
    w.I64(absl::ToUnixNanos(session.last_use_time));
    w.I64(state.memory.shape().knn_len);
    w.I64(state.history != nullptr ? state.history->capacity() : 0);
    w.I64(absl::ToInt64Nanoseconds(session.ttl));
    w.U8(session.pinned ? 1 : 0);
  });
  out += Section(kState, [&](util::BinaryWriter& w) { WriteState(state, w); });
  out += Section(kMemory, [&](util::BinaryWriter& w) { state.memory.WriteTo(w); });
  if (state.history != nullptr) {
    out += Section(kHistory, [&](util::BinaryWriter& w) { state.history->WriteTo(w); });
  }
  if (session.datastore != nullptr) {
    out += Section(kDatastore, [&](util::BinaryWriter& w) { session.datastore->WriteTo(w); });
  }
  AppendFrame(out, kEnd, "");
  return out;
}

absl::StatusOr<SnapshotMeta> DecodeSnapshotMeta(absl::string_view bytes) {
  size_t pos = 0;
  return CheckHeaderAndReadMeta(bytes, &pos);
}

absl::StatusOr<std::unique_ptr<Session>> DecodeSnapshot(absl::string_view bytes,
                                                        absl::string_view model_id,
                                                        const NewMemoryFn& new_memory,
                                                        SnapshotMeta* meta_out) {
  size_t pos = 0;
  MNEMO_ASSIGN_OR_RETURN(SnapshotMeta meta, CheckHeaderAndReadMeta(bytes, &pos));
  if (meta.model_id != model_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("the snapshot was made by model ", meta.model_id,
                     "; this server serves ", model_id));
  }
  auto session = std::make_unique<Session>();
  session->id = meta.session_id;
  session->create_time = meta.create_time;
  session->last_use_time = meta.last_use_time;
  session->ttl = meta.ttl;
  session->pinned = meta.pinned;
  session->state.memory = new_memory(meta.knn_len);
  if (meta.remember_capacity > 0) {
    session->state.history = std::make_unique<datastore::HistoryIndex>(meta.remember_capacity);
  }
  bool seen[6] = {false, true, false, false, false, false};
  while (true) {
    MNEMO_ASSIGN_OR_RETURN(Frame frame, ReadFrame(bytes, &pos, "snapshot section"));
    if (frame.tag == kEnd) break;
    if (frame.tag > kDatastore || seen[frame.tag]) {
      return absl::DataLossError(absl::StrCat("snapshot: unexpected section tag ", frame.tag));
    }
    seen[frame.tag] = true;
    util::BinaryReader in(frame.payload);
    const std::string what = absl::StrCat(SectionName(frame.tag), " section");
    absl::Status status;
    switch (frame.tag) {
      case kState:
        status = ReadState(in, session->state);
        break;
      case kMemory:
        status = session->state.memory.ReadFrom(in);
        break;
      case kHistory:
        status = session->state.history == nullptr
                     ? absl::DataLossError("a history section without a recall capacity")
                     : session->state.history->ReadFrom(in);
        break;
      case kDatastore: {
        absl::StatusOr<std::unique_ptr<datastore::SessionDatastore>> store =
            datastore::SessionDatastore::ReadFrom(in);
        status = store.status();
        if (store.ok()) session->datastore = std::move(*store);
        break;
      }
    }
    if (status.ok()) status = util::ExpectEnd(in, what);
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
    }
  }
  if (!seen[kState] || !seen[kMemory] || (session->state.history != nullptr && !seen[kHistory])) {
    return absl::DataLossError("snapshot: a required section is missing");
  }
  if (pos != bytes.size()) return absl::DataLossError("snapshot: bytes after the end section");
  if (meta_out != nullptr) *meta_out = meta;
  return session;
}

LogMark MarkSession(const Session& session) {
  LogMark mark;
  mark.memory = session.state.memory.MarkNow();
  mark.history_appended = session.state.history != nullptr ? session.state.history->appended() : 0;
  return mark;
}

bool CanLogSince(const Session& session, const LogMark& mark) {
  const SequenceState& state = session.state;
  if (!state.memory.CanDelta(mark.memory)) return false;
  if (state.history == nullptr) return true;
  const int64_t oldest = state.history->appended() - state.history->size();
  return mark.history_appended >= oldest && mark.history_appended <= state.history->appended();
}

std::string EncodeLogRecord(const Session& session, const LogMark& mark, CallKind kind,
                            int64_t tokens_fed, uint32_t tag) {
  const SequenceState& state = session.state;
  util::BinaryWriter w;
  // About what the delta holds: the ring rows of the positions fed since the mark, for every
  // layer, keys and values (+ compressed and kNN rows, bounded by the same), + the state.
  const memory::SessionMemory& memory = state.memory;
  const int64_t fed = memory.next_position() - mark.memory.next_position;
  const int64_t row_bytes = int64_t{2} * memory.shape().layers * memory.shape().heads *
                            memory.shape().d_head * static_cast<int64_t>(sizeof(float));
  w.Reserve(static_cast<size_t>(std::min<int64_t>(fed, memory.shape().raw_capacity()) *
                                    row_bytes * 3 / 2 +
                                (int64_t{64} << 10) + 8 * state.last_logprobs.numel()));
  const char header[kFrameHeader] = {};
  w.Raw(header, sizeof(header));  // [tag][length][crc], patched below
  w.U8(static_cast<uint8_t>(kind));
  w.I64(tokens_fed);
  WriteState(state, w);
  state.memory.WriteDeltaSince(mark.memory, w);
  std::vector<int32_t> tokens;
  std::vector<uint8_t> bytes;
  if (state.history != nullptr) {
    for (int64_t p = mark.history_appended; p < state.history->appended(); ++p) {
      tokens.push_back(state.history->TokenAt(p));
      bytes.push_back(static_cast<uint8_t>(state.history->BytesAt(p)));
    }
  }
  w.Pod(tokens);
  w.Pod(bytes);
  w.I64(absl::ToUnixNanos(session.last_use_time));
  std::string frame = w.Take();
  const absl::string_view payload = absl::string_view(frame).substr(kFrameHeader);
  const int64_t length = static_cast<int64_t>(payload.size());
  const uint32_t crc =
      util::Crc32c(payload, util::Crc32c(absl::string_view(reinterpret_cast<const char*>(&tag), 4)));
  std::memcpy(frame.data(), &tag, 4);
  std::memcpy(frame.data() + 4, &length, 8);
  std::memcpy(frame.data() + 12, &crc, 4);
  return frame;
}

absl::Status ApplyLogRecord(absl::string_view payload, Session& session) {
  // (The payload only: ReadFrame has checked and removed the frame.)
  util::BinaryReader in(payload);
  MNEMO_ASSIGN_OR_RETURN(const uint8_t kind, in.U8("record kind"));
  if (kind < 1 || kind > 3) return absl::DataLossError("record: unknown call kind");
  MNEMO_RETURN_IF_ERROR(in.I64("record tokens").status());
  SequenceState& state = session.state;
  SequenceState scratch;  // the state section is applied only once the memory delta applied
  MNEMO_RETURN_IF_ERROR(ReadState(in, scratch));
  MNEMO_RETURN_IF_ERROR(state.memory.ApplyDelta(in));
  MNEMO_ASSIGN_OR_RETURN(std::vector<int32_t> tokens, in.Pod<int32_t>("record history tokens"));
  MNEMO_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, in.Pod<uint8_t>("record history bytes"));
  MNEMO_ASSIGN_OR_RETURN(const int64_t used, in.I64("record last use time"));
  MNEMO_RETURN_IF_ERROR(util::ExpectEnd(in, "record"));
  if (tokens.size() != bytes.size() || (!tokens.empty() && state.history == nullptr)) {
    return absl::DataLossError("record: history tokens without a history");
  }
  for (size_t i = 0; i < tokens.size(); ++i) state.history->Append(tokens[i], bytes[i]);
  state.tokens_seen = scratch.tokens_seen;
  state.last_exit_layer = scratch.last_exit_layer;
  state.last_logprobs = std::move(scratch.last_logprobs);
  state.last_knn_lm_key = std::move(scratch.last_knn_lm_key);
  session.last_use_time = absl::FromUnixNanos(used);
  return absl::OkStatus();
}

}  // namespace mnemo::session
