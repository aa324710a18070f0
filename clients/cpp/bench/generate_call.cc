#include "clients/cpp/bench/generate_call.h"

#include <utility>

#include "absl/time/clock.h"

namespace mnemo::bench {
namespace {

constexpr int kMaxExitLayer = 4096;

}  // namespace

std::shared_ptr<GenerateCall> GenerateCall::Create(Clock::time_point origin, int stream,
                                                   CallObserver& observer) {
  std::shared_ptr<GenerateCall> call(new GenerateCall(origin, stream, observer));
  call->self_ = call;
  return call;
}

void GenerateCall::Start(v1::Generation::Stub& stub, const v1::GenerateRequest& request,
                         absl::Duration deadline, const std::string& api_key) {
  request_ = request;
  if (!api_key.empty()) context_.AddMetadata("authorization", "Bearer " + api_key);
  if (deadline != absl::InfiniteDuration()) {
    context_.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  }
  record_.start_s = Now();
  stub.async()->Generate(&context_, &request_, this);
  StartRead(&response_);
  StartCall();
}

double GenerateCall::Now() const {
  return std::chrono::duration<double>(Clock::now() - origin_).count();
}

void GenerateCall::OnReadDone(bool ok) {
  if (!ok) return;  // the stream ended; OnDone follows
  const double now = Now();
  const int tokens = response_.tokens_size();
  if (tokens > 0) {
    record_.chunks.push_back({now, tokens});
    record_.output_tokens += tokens;
    for (const v1::Token& token : response_.tokens()) {
      // 0 = not reported; an absurd layer (a server bug) is not allowed to grow the table.
      const int layer =
          token.exit_layer() > 0 && token.exit_layer() <= kMaxExitLayer ? token.exit_layer() : 0;
      if (static_cast<size_t>(layer) >= record_.exit_layer_counts.size()) {
        record_.exit_layer_counts.resize(layer + 1, 0);
      }
      ++record_.exit_layer_counts[layer];
    }
    observer_.OnTokens(tokens);
  }
  if (response_.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
    record_.finish_reason = response_.finish_reason();
  }
  if (response_.has_usage()) {
    record_.usage_prompt_tokens = response_.usage().prompt_tokens();
    record_.usage_generated_tokens = response_.usage().generated_tokens();
  }
  StartRead(&response_);
}

void GenerateCall::OnDone(const grpc::Status& status) {
  record_.end_s = Now();
  record_.code = status.error_code();
  if (!status.ok()) record_.message = status.error_message();
  // Keep this object alive to the end of the function, whatever the observer does.
  std::shared_ptr<GenerateCall> self = std::move(self_);
  observer_.OnCallDone(stream_, std::move(record_));
}

}  // namespace mnemo::bench
