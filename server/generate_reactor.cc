#include "server/generate_reactor.h"

#include <utility>

#include "absl/status/status.h"
#include "server/proto_convert.h"
#include "server/raw_message.h"

namespace mnemo::server {
GenerateReactor::GenerateReactor(ServerState& state, std::shared_ptr<Call> call)
    : state_(state), call_(std::move(call)) {}

absl::StatusOr<engine::GenerateOptions> GenerateReactor::ParseRequest(
    const grpc::ByteBuffer& bytes) {
  v1::GenerateRequest request;
  if (absl::Status parsed = server::ParseRequest(bytes, &request); !parsed.ok()) return parsed;
  absl::StatusOr<std::string> session = call_->EngineSessionId(request.session_id());
  if (!session.ok()) return session.status();
  request.set_session_id(*std::move(session));
  if (request.has_knn_lm()) {
    if (absl::Status s = call_->CheckDatastore(request.knn_lm().datastore()); !s.ok()) return s;
  }
  call_->set_prompt(request.prompt());
  return ToGenerateOptions(request, call_->engine()->config().max_top_logprobs);
}

GenerateReactor* GenerateReactor::Start(ServerState& state, grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer& request) {
  std::shared_ptr<GenerateReactor> reactor(
      new GenerateReactor(state, Call::Begin(state, context, "Generate")));
  reactor->self_ = reactor;
  GenerateReactor* raw = reactor.get();

  absl::Status status = raw->call_->status();
  if (status.ok()) {
    absl::StatusOr<engine::GenerateOptions> options = raw->ParseRequest(request);
    if (!options.ok()) {
      status = options.status();
    } else {
      std::weak_ptr<GenerateReactor> weak = reactor;
      raw->stream_ = std::make_shared<engine::GenerateStream>([weak] {
        if (std::shared_ptr<GenerateReactor> alive = weak.lock()) alive->OnStreamReady();
      });
      // From here on the engine may call OnStreamReady on its thread, even before this
      // returns; gRPC queues operations started before the reactor is bound.
      status = raw->call_->engine()->Submit(*std::move(options), raw->stream_);
    }
  }
  if (!status.ok()) {
    {
      absl::MutexLock lock(&raw->mu_);
      raw->finished_ = true;
    }
    raw->Finish(raw->call_->Finish(status));
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
  call_->Release();
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
    finish_status_ = RecordFinal(*pending.final);
    finished_ = true;
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
    finish_status_ = RecordFinal(final);
    finished_ = true;
    if (final.status.ok()) {
      response_.set_finish_reason(ToProto(final.reason));
      ToProto(final.usage, response_.mutable_usage());
      SerializeResponse(response_, &wire_);
      return Action::kWriteAndFinish;
    }
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

grpc::Status GenerateReactor::RecordFinal(const engine::GenerateFinal& final) {
  state_.metrics().ObserveGenerateFinal(final, absl::Now() - start_);
  call_->AddTokens(final.usage.prompt_tokens, final.usage.generated_tokens);
  call_->set_queue_time(final.queue_time);
  return call_->Finish(cancelled_ ? absl::CancelledError("generation cancelled") : final.status);
}

}  // namespace mnemo::server
