#include "server/session_transfer.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "mnemo/v1/sessions.pb.h"
#include "server/proto_convert.h"
#include "server/raw_message.h"
#include "server/status_convert.h"

namespace mnemo::server {
namespace {

constexpr int64_t kDefaultChunk = int64_t{1} << 20;
constexpr int64_t kMaxChunk = int64_t{4} << 20;

class ExportReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit ExportReactor(ServerState& state) : state_(state) {}

  void Start(const grpc::ByteBuffer& bytes) {
    absl::StatusOr<engine::Engine*> engine = state_.BeginCall();
    if (!engine.ok()) return Done(engine.status());
    admitted_ = true;
    v1::ExportSessionRequest request;
    if (absl::Status parsed = ParseRequest(bytes, &request); !parsed.ok()) return Done(parsed);
    if (request.chunk_bytes() < 0 || request.chunk_bytes() > kMaxChunk) {
      return Done(absl::InvalidArgumentError(absl::StrCat(
          "chunk_bytes must be in [0, ", kMaxChunk, "], got ", request.chunk_bytes())));
    }
    chunk_ = request.chunk_bytes() > 0 ? request.chunk_bytes() : kDefaultChunk;
    (*engine)->ExportSession(request.session_id(), [this](absl::StatusOr<std::string> snapshot) {
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
    if (admitted_) state_.EndCall();
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

  void Done(const absl::Status& status) {
    state_.metrics().CountRequest("ExportSession", absl::StatusCodeToString(status.code()));
    Finish(ToGrpcStatus(status));
  }

  ServerState& state_;
  bool admitted_ = false;
  int64_t chunk_ = kDefaultChunk;
  std::string snapshot_;
  size_t sent_ = 0;
  grpc::ByteBuffer buffer_;
};

class ImportReactor : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  ImportReactor(ServerState& state, grpc::ByteBuffer* response)
      : state_(state), response_(response) {}

  void Start() {
    absl::StatusOr<engine::Engine*> engine = state_.BeginCall();
    if (!engine.ok()) return Done(engine.status());
    admitted_ = true;
    engine_ = *engine;
    StartRead(&buffer_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client half-closed: everything is here
      engine_->ImportSession(session_id_, std::move(snapshot_),
                             [this](absl::StatusOr<engine::SessionInfo> info) {
                               if (info.ok()) {
                                 v1::Session reply;
                                 ToProto(*info, &reply);
                                 SerializeResponse(reply, response_);
                               }
                               Done(info.status());
                             });
      return;
    }
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
    if (admitted_) state_.EndCall();
    delete this;
  }

 private:
  void Done(const absl::Status& status) {
    state_.metrics().CountRequest("ImportSession", absl::StatusCodeToString(status.code()));
    Finish(ToGrpcStatus(status));
  }

  ServerState& state_;
  grpc::ByteBuffer* const response_;
  bool admitted_ = false;
  engine::Engine* engine_ = nullptr;
  bool first_ = true;
  std::string session_id_;
  std::string snapshot_;
  grpc::ByteBuffer buffer_;
};

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* StartExportSession(ServerState& state,
                                                               const grpc::ByteBuffer& request) {
  auto* reactor = new ExportReactor(state);
  reactor->Start(request);
  return reactor;
}

grpc::ServerReadReactor<grpc::ByteBuffer>* StartImportSession(ServerState& state,
                                                              grpc::ByteBuffer* response) {
  auto* reactor = new ImportReactor(state, response);
  reactor->Start();
  return reactor;
}

}  // namespace mnemo::server
