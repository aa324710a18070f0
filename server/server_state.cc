#include "server/server_state.h"

namespace mnemo::server {

void ServerState::SetEngine(engine::Engine* engine) {
  absl::MutexLock lock(&mu_);
  engine_ = engine;
}

void ServerState::StartDraining() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
}

bool ServerState::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

absl::StatusOr<engine::Engine*> ServerState::BeginCall() {
  absl::MutexLock lock(&mu_);
  if (draining_) return absl::UnavailableError("server is draining");
  if (engine_ == nullptr) return absl::UnavailableError("model is loading");
  ++in_flight_;
  return engine_;
}

void ServerState::EndCall() {
  absl::MutexLock lock(&mu_);
  --in_flight_;
}

int ServerState::calls_in_flight() const {
  absl::MutexLock lock(&mu_);
  return in_flight_;
}

bool ServerState::WaitIdle(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(absl::Condition(
                                   +[](int* n) { return *n == 0; }, &in_flight_),
                               deadline);
}

}  // namespace mnemo::server
