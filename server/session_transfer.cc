#include "server/session_transfer.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "engine/session/session_snapshot.h"
#include "mnemo/v1/sessions.pb.h"
#include "server/proto_convert.h"
#include "server/raw_message.h"

namespace mnemo::server {
namespace {

constexpr int64_t kDefaultChunk = int64_t{1} << 20;
constexpr int64_t kMaxChunk = int64_t{4} << 20;

class ExportReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  ExportReactor(ServerState& state, grpc::CallbackServerContext* context)
      : call_(Call::Begin(state, context, "ExportSession")) {}

  void Start(const grpc::ByteBuffer& bytes) {
    if (!call_->ok()) return Done(call_->status());
    v1::ExportSessionRequest request;
    if (absl::Status parsed = ParseRequest(bytes, &request); !parsed.ok()) return Done(parsed);
    if (request.chunk_bytes() < 0 || request.chunk_bytes() > kMaxChunk) {
      return Done(absl::InvalidArgumentError(absl::StrCat("chunk_bytes must be in [0, ", kMaxChunk,
                                                          "], got ", request.chunk_bytes())));
    }
    chunk_ = request.chunk_bytes() > 0 ? request.chunk_bytes() : kDefaultChunk;
    absl::StatusOr<std::string> id =
        call_->EngineSessionId(request.session_id(), /*required=*/true);
    if (!id.ok()) return Done(id.status());
    call_->engine()->ExportSession(*std::move(id), [this](absl::StatusOr<std::string> snapshot) {
      if (!snapshot.ok()) return Done(snapshot.status());
      snapshot_ = *std::move(snapshot);
      WriteNext();
    });
  }

  void OnWriteDone(bool ok) override {
    if (!ok) return Done(absl::CancelledError("the client went away during the export"));
    WriteNext();
  }

  void OnDone() override {
    call_->Release();
    delete this;
  }

 private:
  void WriteNext() {
    v1::SessionSnapshotChunk chunk;
    if (sent_ == 0) chunk.set_total_bytes(static_cast<int64_t>(snapshot_.size()));
    const size_t n = std::min<size_t>(static_cast<size_t>(chunk_), snapshot_.size() - sent_);
    if (n == 0 && sent_ > 0) return Done(absl::OkStatus());  // everything went out
    chunk.set_data(snapshot_.substr(sent_, n));
    sent_ += n;
    SerializeResponse(chunk, &buffer_);
    StartWrite(&buffer_);
  }

  void Done(const absl::Status& status) { Finish(call_->Finish(status)); }

  const std::shared_ptr<Call> call_;
  int64_t chunk_ = kDefaultChunk;
  std::string snapshot_;
  size_t sent_ = 0;
  grpc::ByteBuffer buffer_;
};

class ImportReactor : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  ImportReactor(ServerState& state, grpc::CallbackServerContext* context,
                grpc::ByteBuffer* response)
      : state_(state), call_(Call::Begin(state, context, "ImportSession")), response_(response) {}

  void Start() {
    if (!call_->ok()) return Done(call_->status());
    StartRead(&buffer_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) return Import();  // the client half-closed: everything is here
    v1::ImportSessionRequest request;
    if (absl::Status parsed = ParseRequest(buffer_, &request); !parsed.ok()) return Done(parsed);
    if (first_) {
      session_id_ = request.session_id();
      first_ = false;
    } else if (!request.session_id().empty() && request.session_id() != session_id_) {
      return Done(absl::InvalidArgumentError(
          "session_id may be set only in the first ImportSessionRequest"));
    }
    if (static_cast<int64_t>(snapshot_.size() + request.data().size()) > kMaxImportBytes) {
      return Done(absl::ResourceExhaustedError(
          absl::StrCat("the imported snapshot exceeds ", kMaxImportBytes, " bytes")));
    }
    snapshot_ += request.data();
    StartRead(&buffer_);
  }

  void OnDone() override {
    call_->Release();
    delete this;
  }

 private:
  void Import() {
    absl::StatusOr<std::string> id = EngineId();
    if (!id.ok()) return Done(id.status());
    CheckSessionQuota(call_, [this, id = *std::move(id)](absl::Status quota) mutable {
      if (!quota.ok()) return Done(quota);
      call_->engine()->ImportSession(
          std::move(id), std::move(snapshot_), [this](absl::StatusOr<engine::SessionInfo> info) {
            if (info.ok()) {
              v1::Session reply;
              ToProto(*info, &reply);
              reply.set_session_id(call_->ClientSessionId(info->session_id));
              call_->set_session(reply.session_id());
              SerializeResponse(reply, response_);
            }
            Done(info.status());
          });
    });
  }

  // The engine id to import under. Without tenants an empty id stays empty (the engine takes
  // the exported id). With tenants it must carry the caller's prefix: the exported id's own
  // part (after a configured tenant's prefix, if it has one) is kept.
  absl::StatusOr<std::string> EngineId() {
    if (!session_id_.empty() || call_->tenant() == nullptr) {
      return call_->EngineSessionId(session_id_);
    }
    absl::StatusOr<session::SnapshotMeta> meta = session::DecodeSnapshotMeta(snapshot_);
    if (!meta.ok()) return meta.status();
    absl::string_view own = meta->session_id;
    for (const std::string& tenant : state_.tenants().names()) {
      if (absl::ConsumePrefix(&own, tenant + ".")) break;
    }
    return call_->EngineSessionId(own);
  }

  void Done(const absl::Status& status) { Finish(call_->Finish(status)); }

  ServerState& state_;
  const std::shared_ptr<Call> call_;
  grpc::ByteBuffer* const response_;
  bool first_ = true;
  std::string session_id_;
  std::string snapshot_;
  grpc::ByteBuffer buffer_;
};

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* StartExportSession(ServerState& state,
                                                               grpc::CallbackServerContext* context,
                                                               const grpc::ByteBuffer& request) {
  auto* reactor = new ExportReactor(state, context);
  reactor->Start(request);
  return reactor;
}

grpc::ServerReadReactor<grpc::ByteBuffer>* StartImportSession(ServerState& state,
                                                              grpc::CallbackServerContext* context,
                                                              grpc::ByteBuffer* response) {
  auto* reactor = new ImportReactor(state, context, response);
  reactor->Start();
  return reactor;
}

void CheckSessionQuota(std::shared_ptr<Call> call, std::function<void(absl::Status)> then) {
  const Tenant* tenant = call->tenant();
  const TenantLimits limits = tenant != nullptr ? tenant->config().limits : TenantLimits();
  if (limits.max_sessions <= 0 && limits.max_memory_bytes <= 0) return then(absl::OkStatus());
  engine::Engine* engine = call->engine();
  engine->ListSessions([call = std::move(call), limits, then = std::move(then)](
                           absl::StatusOr<std::vector<engine::SessionInfo>> sessions) {
    if (!sessions.ok()) return then(sessions.status());
    int64_t count = 0, bytes = 0;
    for (const engine::SessionInfo& s : *sessions) {
      if (!call->OwnsSession(s.session_id)) continue;
      ++count;
      bytes += s.memory.bytes;
    }
    const std::string& name = call->tenant()->name();
    if (limits.max_sessions > 0 && count >= limits.max_sessions) {
      return then(call->LimitError(
          "max_sessions",
          absl::StrCat("tenant '", name, "' is at its limit max_sessions = ", limits.max_sessions,
                       " live sessions; delete one or wait for one to expire")));
    }
    if (limits.max_memory_bytes > 0 && bytes >= limits.max_memory_bytes) {
      return then(call->LimitError(
          "max_memory_bytes",
          absl::StrCat("tenant '", name,
                       "' is at its limit max_memory_bytes = ", limits.max_memory_bytes,
                       " (its live sessions hold ", bytes, " bytes); delete a session first")));
    }
    then(absl::OkStatus());
  });
}

}  // namespace mnemo::server
