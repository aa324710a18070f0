#include "server/generate_reactor.h"

#include <utility>

#include "absl/status/status.h"
#include "server/proto_convert.h"
#include "server/raw_message.h"
#include "server/status_convert.h"

namespace mnemo::server {
namespace {
constexpr char kRpc[] = "Generate";

absl::StatusOr<engine::GenerateOptions> ParseGenerateRequest(const grpc::ByteBuffer& bytes,
                                                             int max_top_logprobs) {
  v1::GenerateRequest request;
  if (absl::Status parsed = ParseRequest(bytes, &request); !parsed.ok()) return parsed;
  return ToGenerateOptions(request, max_top_logprobs);
}

}  // namespace

GenerateReactor::GenerateReactor(ServerState& state) : state_(state) {}

GenerateReactor* GenerateReactor::Start(ServerState& state, const grpc::ByteBuffer& request) {
  std::shared_ptr<GenerateReactor> reactor(new GenerateReactor(state));
  reactor->self_ = reactor;
  GenerateReactor* raw = reactor.get();

  absl::Status status;
  absl::StatusOr<engine::Engine*> engine = state.BeginCall();
  if (!engine.ok()) {
    status = engine.status();
  } else {
    raw->admitted_ = true;
    absl::StatusOr<engine::GenerateOptions> options =
        ParseGenerateRequest(request, (*engine)->config().max_top_logprobs);
    if (!options.ok()) {
      status = options.status();
    } else {
      std::weak_ptr<GenerateReactor> weak = reactor;
      raw->stream_ = std::make_shared<engine::GenerateStream>([weak] {
        if (std::shared_ptr<GenerateReactor> alive = weak.lock()) alive->OnStreamReady();
      });
      // From here on the engine may call OnStreamReady on its thread, even before this
      // returns; gRPC queues operations started before the reactor is bound.
      status = (*engine)->Submit(*std::move(options), raw->stream_);
    }
  }
  if (!status.ok()) {
    grpc::Status error = ToGrpcStatus(status);
    {
      absl::MutexLock lock(&raw->mu_);
      raw->finished_ = true;
    }
    state.metrics().CountRequest(kRpc, absl::StatusCodeToString(status.code()));
    raw->Finish(std::move(error));
  }
  return raw;
}

void GenerateReactor::OnStreamReady() {
  Action action;
  grpc::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (write_in_flight_ || finished_) return;  // OnWriteDone will take what is pending
    action = NextLocked();
    status = finish_status_;
  }
  Perform(action, status);
}

void GenerateReactor::OnWriteDone(bool ok) {
  Action action;
  grpc::Status status;
  {
    absl::MutexLock lock(&mu_);
    write_in_flight_ = false;
    if (!ok && !cancelled_) {
      // The client is gone (the call was cancelled under us): stop generating.
      cancelled_ = true;
      stream_->Cancel();
    }
    if (pending_error_.has_value()) {
      finished_ = true;
      finish_status_ = cancelled_ ? grpc::Status::CANCELLED : *pending_error_;
      action = Action::kFinish;
    } else {
      action = NextLocked();
    }
    status = finish_status_;
  }
  Perform(action, status);
}

void GenerateReactor::OnCancel() {
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    cancelled_ = true;
  }
  // The engine notices within one step and closes the stream; OnStreamReady then finishes.
  if (stream_ != nullptr) stream_->Cancel();
}

void GenerateReactor::OnDone() {
  if (admitted_) state_.EndCall();
  // Drops the self-reference; `this` is deleted here unless the engine thread is inside
  // OnStreamReady right now, in which case it goes when that call returns.
  std::shared_ptr<GenerateReactor> self = std::move(self_);
}

GenerateReactor::Action GenerateReactor::NextLocked() {
  engine::GenerateStream::Pending pending = stream_->Take();
  if (pending.empty()) return Action::kNone;

  if (cancelled_) {
    // Nothing more goes to the client; wait for the engine's Close before finishing.
    if (!pending.final.has_value()) return Action::kNone;
    RecordFinal(*pending.final);
    finished_ = true;
    finish_status_ = grpc::Status(grpc::StatusCode::CANCELLED, "generation cancelled");
    return Action::kFinish;
  }

  if (!pending.tokens.empty()) {
    const absl::Time now = absl::Now();
    Metrics& metrics = state_.metrics();
    if (!last_token_time_.has_value()) {
      metrics.ObserveTimeToFirstToken(now - start_);
    } else {
      metrics.ObserveTokens(static_cast<int>(pending.tokens.size()), now - *last_token_time_);
    }
    last_token_time_ = now;
    for (const engine::TokenOutput& token : pending.tokens) {
      metrics.ObserveExitLayer(token.exit_layer);
    }
  }

  response_.Clear();
  AppendTokens(pending.tokens, pending.text, &response_);
  const bool has_content = response_.tokens_size() > 0 || !response_.text().empty();

  if (pending.final.has_value()) {
    const engine::GenerateFinal& final = *pending.final;
    RecordFinal(final);
    finished_ = true;
    if (final.status.ok()) {
      response_.set_finish_reason(ToProto(final.reason));
      ToProto(final.usage, response_.mutable_usage());
      finish_status_ = grpc::Status::OK;
      SerializeResponse(response_, &wire_);
      return Action::kWriteAndFinish;
    }
    finish_status_ = ToGrpcStatus(final.status);
    if (!has_content) return Action::kFinish;
    // Deliver the tokens produced before the failure, then the error.
    finished_ = false;
    pending_error_ = finish_status_;
    write_in_flight_ = true;
    SerializeResponse(response_, &wire_);
    return Action::kWrite;
  }

  if (!has_content) return Action::kNone;
  write_in_flight_ = true;
  SerializeResponse(response_, &wire_);
  return Action::kWrite;
}

void GenerateReactor::Perform(Action action, const grpc::Status& status) {
  // wire_ is stable here: only NextLocked writes it, and not while a write is in flight or
  // after finishing.
  switch (action) {
    case Action::kNone:
      return;
    case Action::kWrite:
      StartWrite(&wire_);
      return;
    case Action::kWriteAndFinish:
      StartWriteAndFinish(&wire_, grpc::WriteOptions(), status);
      return;
    case Action::kFinish:
      Finish(status);
      return;
  }
}

void GenerateReactor::RecordFinal(const engine::GenerateFinal& final) {
  Metrics& metrics = state_.metrics();
  metrics.ObserveGenerateFinal(final, absl::Now() - start_);
  const absl::StatusCode code = cancelled_ ? absl::StatusCode::kCancelled : final.status.code();
  metrics.CountRequest(kRpc, absl::StatusCodeToString(code));
}

}  // namespace mnemo::server
