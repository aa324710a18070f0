// GenerateReactor: one Generation.Generate call, from the engine's GenerateStream to the client.
// The method is registered raw (ByteBuffer in and out, see raw_message.h) so that a request
// protobuf cannot parse still gets INVALID_ARGUMENT naming the field.
//
// Flow: the engine's loop thread calls OnStreamReady after each token (and after the final
// Close); if no write is in flight the reactor Take()s everything produced so far — tokens and
// text coalesced into one chunk — and starts a write. OnWriteDone takes more or waits. The
// chunk that carries the engine's final result also carries finish_reason and usage and is
// sent with StartWriteAndFinish; a non-OK final status ends the call with that status.
// Client cancellation or deadline (OnCancel), or a failed write, cancels the engine stream; the
// engine stops within one step and closes the stream, and the reactor then finishes with
// CANCELLED. So the reactor finishes exactly once, always after the engine's Close.
//
// Ownership: the reactor owns itself through `self_` until gRPC calls OnDone. The stream's
// on_ready callback holds only a weak_ptr, so the engine may call it at any time (even after
// OnDone) without touching a deleted reactor. Borrows ServerState, which outlives every call.
// Thread-safety: reactions and OnStreamReady run on gRPC and engine threads concurrently; all
// mutable state is guarded by mu_, and no gRPC operation is started with mu_ held. Nothing
// here blocks.
#ifndef MNEMO_SERVER_GENERATE_REACTOR_H_
#define MNEMO_SERVER_GENERATE_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/generate_stream.h"
#include "mnemo/v1/generation.pb.h"
#include "server/call.h"
#include "server/server_state.h"

namespace mnemo::server {

class GenerateReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  // Validates and submits the request; on failure the returned reactor has already finished
  // with the error (INVALID_ARGUMENT naming the field, UNAVAILABLE while draining...).
  // `request` is a serialised mnemo.v1.GenerateRequest.
  static GenerateReactor* Start(ServerState& state, grpc::CallbackServerContext* context,
                                const grpc::ByteBuffer& request);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // What the caller must do after releasing mu_.
  enum class Action { kNone, kWrite, kWriteAndFinish, kFinish };

  GenerateReactor(ServerState& state, std::shared_ptr<Call> call);
  // Parses and converts the request in the caller's terms (session id, datastore access).
  absl::StatusOr<engine::GenerateOptions> ParseRequest(const grpc::ByteBuffer& bytes);
  // Engine loop thread, after each Push/Close.
  void OnStreamReady();
  // Takes what the stream has and decides the next gRPC operation; none may be in flight.
  Action NextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Perform(Action action, const grpc::Status& status);
  // Records the end of the call; returns the status the client gets.
  grpc::Status RecordFinal(const engine::GenerateFinal& final) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ServerState& state_;
  const std::shared_ptr<Call> call_;  // admission released in OnDone
  const absl::Time start_ = absl::Now();
  std::shared_ptr<GenerateReactor> self_;           // released in OnDone
  std::shared_ptr<engine::GenerateStream> stream_;  // shared with the engine

  absl::Mutex mu_;
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;   // Finish (or WriteAndFinish) was started
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;  // client gone; nothing more is written
  // A non-OK final that must wait for the tokens before it to be written.
  std::optional<grpc::Status> pending_error_ ABSL_GUARDED_BY(mu_);
  grpc::Status finish_status_ ABSL_GUARDED_BY(mu_);
  // The chunk being assembled, and its serialised form for the write in flight; only touched
  // while no write is in flight.
  v1::GenerateResponse response_ ABSL_GUARDED_BY(mu_);
  grpc::ByteBuffer wire_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Time> last_token_time_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mnemo::server

#endif  // MNEMO_SERVER_GENERATE_REACTOR_H_
