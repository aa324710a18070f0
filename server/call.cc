#include "server/call.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/session/session_store.h"
#include "server/status_convert.h"

namespace mnemo::server {

Call::Call(ServerState& state, const grpc::CallbackServerContext* context, absl::string_view rpc)
    : state_(state),
      context_(context),
      rpc_(rpc),
      peer_(context != nullptr ? context->peer() : std::string()) {}

std::shared_ptr<Call> Call::Begin(ServerState& state, const grpc::CallbackServerContext* context,
                                  absl::string_view rpc) {
  std::shared_ptr<Call> call(new Call(state, context, rpc));
  absl::StatusOr<engine::Engine*> engine = state.BeginCall();
  if (!engine.ok()) {
    call->admission_ = engine.status();
    return call;
  }
  call->state_admitted_ = true;
  call->engine_ = *engine;

  std::optional<absl::string_view> authorization;
  if (context != nullptr) {
    const auto& metadata = context->client_metadata();
    auto it = metadata.find("authorization");
    if (it != metadata.end())
      authorization = absl::string_view(it->second.data(), it->second.size());
  }
  absl::StatusOr<std::shared_ptr<Tenant>> tenant = state.tenants().Authenticate(authorization);
  if (!tenant.ok()) {
    call->admission_ = tenant.status();
    return call;
  }
  call->tenant_ = *std::move(tenant);
  if (call->tenant_ != nullptr) {
    std::string limit;
    absl::Status admitted = call->tenant_->Admit(absl::Now(), &limit);
    if (!admitted.ok()) {
      state.metrics().CountTenantRejection(call->tenant_->name(), limit);
      call->admission_ = admitted;
      return call;
    }
    call->tenant_admitted_ = true;
    const bool runs_model = rpc == "Generate" || rpc == "Score" || rpc == "AddToSessionDatastore";
    if (runs_model) {
      absl::Status shared =
          state.tenants().AdmitModelCall(*call->tenant_, (*engine)->config().max_running);
      if (!shared.ok()) {
        state.metrics().CountTenantRejection(call->tenant_->name(), "fair_share");
        call->admission_ = shared;
        return call;
      }
      call->share_admitted_ = true;
    }
  }
  return call;
}

Call::~Call() { Release(); }

absl::StatusOr<std::string> Call::EngineSessionId(absl::string_view client_id, bool required) {
  if (client_id.empty() && !required) return std::string();
  set_session(client_id);
  return server::EngineSessionId(tenant(), client_id);
}

std::string Call::ClientSessionId(absl::string_view engine_id) const {
  return server::ClientSessionId(tenant(), engine_id);
}

bool Call::OwnsSession(absl::string_view engine_id) const {
  return server::OwnsSession(tenant(), engine_id);
}

std::string Call::NewEngineSessionId() {
  // The engine's generator: 128 bits from getrandom, checked unused in memory and on disk
  // happens at create (ALREADY_EXISTS there is a 2^-128 event).
  const std::string id = session::SessionStore::RandomId();
  set_session(id);
  return tenant_ == nullptr ? id : absl::StrCat(tenant_->prefix(), id);
}

absl::Status Call::CheckDatastore(absl::string_view name) const {
  if (tenant_ == nullptr || name.empty() || name == "session") return absl::OkStatus();
  if (tenant_->MayUseDatastore(name)) return absl::OkStatus();
  std::vector<std::string> visible;
  for (const engine::DatastoreInfo& d : engine_->ListDatastores()) {
    if (tenant_->MayUseDatastore(d.name)) visible.push_back(d.name);
  }
  return absl::NotFoundError(absl::StrCat(
      "datastore \"", name, "\" is not loaded (loaded: ", absl::StrJoin(visible, ", "), ")"));
}

absl::Status Call::LimitError(absl::string_view limit, absl::string_view message) const {
  if (tenant_ != nullptr) state_.metrics().CountTenantRejection(tenant_->name(), limit);
  return absl::ResourceExhaustedError(message);
}

void Call::set_prompt(absl::string_view text) {
  if (state_.request_log().log_prompts()) prompt_ = std::string(text);
}

grpc::Status Call::Finish(const absl::Status& outcome) {
  const absl::Status status = !outcome.ok() && context_ != nullptr && context_->IsCancelled()
                                  ? absl::CancelledError("the client cancelled the call")
                                  : outcome;
  const absl::Status client = ClientStatus(tenant(), status);
  if (finished_.exchange(true)) return ToGrpcStatus(client);
  const absl::Time now = absl::Now();
  const std::string code = absl::StatusCodeToString(status.code());
  Metrics& metrics = state_.metrics();
  metrics.CountRequest(rpc_, code);
  if (tenant_ != nullptr) {
    metrics.CountTenantRequest(tenant_->name(), code, tokens_in_, tokens_out_);
    tenant_->Charge(tokens_in_ + tokens_out_, now);
  }
  RequestLog& log = state_.request_log();
  if (log.enabled()) {
    RequestRecord record;
    record.start = start_;
    record.method = rpc_;
    if (tenant_ != nullptr) record.tenant = tenant_->name();
    record.session = session_;
    record.peer = peer_;
    record.status = client;
    record.tokens_in = tokens_in_;
    record.tokens_out = tokens_out_;
    record.queue_time = queue_time_;
    record.total_time = now - start_;
    record.prompt = prompt_;
    log.Write(record);
  }
  return ToGrpcStatus(client);
}

void Call::Release() {
  if (released_.exchange(true)) return;
  if (share_admitted_) state_.tenants().ReleaseModelCall(*tenant_);
  if (tenant_admitted_) tenant_->Release();
  if (state_admitted_) state_.EndCall();
}

void Call::FinishUnary(grpc::ServerUnaryReactor* reactor, const absl::Status& status) {
  reactor->Finish(Finish(status));
  Release();
}

}  // namespace mnemo::server
