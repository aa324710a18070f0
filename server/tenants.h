// Tenants: who may call the server (API keys, --auth_keys FILE), what each may use (limits), and
// the namespace that keeps one tenant's sessions out of another's reach (docs/security.md).
//
// The keys file is JSON:
//   {"tenants": [{"name": "team-a", "key_sha256": "<64 hex digits>", "max_sessions": 100,
//                 "max_memory_bytes": 1073741824, "max_concurrent": 8,
//                 "tokens_per_minute": 60000, "datastores": ["wiki"]}, ...]}
// name and key_sha256 are required; every limit is optional (absent or 0 = unlimited);
// "datastores" absent = every shared datastore, else only those named. Clients send the key
// itself as `authorization: Bearer KEY` metadata; only its SHA-256 is kept.
//
// Isolation is by construction: a tenant's session "s" is the engine's session "team-a.s"
// (tenant names cannot contain '.', client ids may), so another tenant's request for "s" names
// a different session and gets NOT_FOUND, exactly like a session that never existed; create
// with the same id succeeds for each; lists are filtered by prefix. Without --auth_keys there
// is one anonymous tenant (nullptr) and ids pass through unchanged.
//
// Owns the live Tenant objects (keyed by name, kept across reloads so counters survive).
// Thread-safety: every method is thread-safe; Tenant counters are atomics or mutex-guarded,
// Reload swaps the key table under a mutex while calls in flight keep their Tenant alive.
#ifndef MNEMO_SERVER_TENANTS_H_
#define MNEMO_SERVER_TENANTS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace mnemo::server {

struct TenantLimits {  // 0 = unlimited
  int64_t max_sessions = 0;
  int64_t max_memory_bytes = 0;
  int64_t max_concurrent = 0;
  int64_t tokens_per_minute = 0;
};

struct TenantConfig {
  std::string name;        // [a-z0-9_-]{1,63}
  std::string key_sha256;  // 64 lower-case hex digits
  TenantLimits limits;
  std::optional<std::vector<std::string>> datastores;  // nullopt = all shared datastores
};

// Parses the keys file's JSON; errors name `origin` (the path) and the entry at fault.
absl::StatusOr<std::vector<TenantConfig>> ParseTenantsJson(absl::string_view json,
                                                           absl::string_view origin);
absl::StatusOr<std::vector<TenantConfig>> LoadTenantsFile(const std::string& path);

// Lower-case hex SHA-256 of `bytes`.
std::string Sha256Hex(absl::string_view bytes);

// One configured tenant: its limits and its live usage.
class Tenant {
 public:
  explicit Tenant(std::string name);

  const std::string& name() const { return name_; }
  // The prefix its sessions carry in the engine: "<name>.".
  const std::string& prefix() const { return prefix_; }
  TenantConfig config() const ABSL_LOCKS_EXCLUDED(mu_);
  void set_config(TenantConfig config) ABSL_LOCKS_EXCLUDED(mu_);

  // Admission of one call: RESOURCE_EXHAUSTED naming max_concurrent or tokens_per_minute (also
  // stored in `*limit`). On OK the caller must call Release() once when the call ends.
  absl::Status Admit(absl::Time now, std::string* limit) ABSL_LOCKS_EXCLUDED(mu_);
  void Release() ABSL_LOCKS_EXCLUDED(mu_);
  // Charges model tokens (prompt + generated / scored) against tokens_per_minute; the budget
  // refills continuously, may go negative for the call that overspends, and admits again once
  // it is positive.
  void Charge(int64_t tokens, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  int64_t in_flight() const ABSL_LOCKS_EXCLUDED(mu_);

  bool MayUseDatastore(absl::string_view name) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void RefillLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string name_;
  const std::string prefix_;
  mutable absl::Mutex mu_;
  TenantConfig config_ ABSL_GUARDED_BY(mu_);
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  double token_budget_ ABSL_GUARDED_BY(mu_) = 0;  // tokens; refills at tokens_per_minute
  absl::Time refilled_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

class Tenants {
 public:
  Tenants() = default;
  Tenants(const Tenants&) = delete;
  Tenants& operator=(const Tenants&) = delete;

  // Installs (or replaces) the tenants; from then on every call must carry a key. Tenants
  // that stay keep their usage; removed ones lose their key at once (calls in flight finish).
  // INVALID_ARGUMENT for duplicate names or keys.
  absl::Status Configure(std::vector<TenantConfig> tenants) ABSL_LOCKS_EXCLUDED(mu_);
  bool enabled() const ABSL_LOCKS_EXCLUDED(mu_);

  // The tenant whose key `authorization` ("Bearer KEY") carries; null when auth is off.
  // UNAUTHENTICATED when the header is missing, malformed or the key unknown (the message never
  // says which tenants exist).
  absl::StatusOr<std::shared_ptr<Tenant>> Authenticate(
      std::optional<absl::string_view> authorization) const ABSL_LOCKS_EXCLUDED(mu_);

  // Configured tenant names, sorted (the bounded label set of the per-tenant metrics).
  std::vector<std::string> names() const ABSL_LOCKS_EXCLUDED(mu_);

  // Fair share of the engine's `capacity` running slots (--max_running) between the tenants
  // with model calls (Generate, Score, AddToSessionDatastore) in flight: while `capacity` such
  // calls are in flight, a tenant that already has ceil(capacity / active tenants) of them is
  // refused with RESOURCE_EXHAUSTED naming "fair_share". So a flood holds at most its share of
  // the slots and of the engine's queue, and another tenant's call waits at most for one of the
  // flood's calls to end. On OK the caller must call ReleaseModelCall once.
  absl::Status AdmitModelCall(const Tenant& tenant, int64_t capacity)
      ABSL_LOCKS_EXCLUDED(share_mu_);
  void ReleaseModelCall(const Tenant& tenant) ABSL_LOCKS_EXCLUDED(share_mu_);

 private:
  absl::Mutex share_mu_;
  absl::flat_hash_map<std::string, int64_t> model_calls_ ABSL_GUARDED_BY(share_mu_);
  int64_t model_calls_total_ ABSL_GUARDED_BY(share_mu_) = 0;

  mutable absl::Mutex mu_;
  bool enabled_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, std::shared_ptr<Tenant>> by_key_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<Tenant>> by_name_ ABSL_GUARDED_BY(mu_);
};

// Session ids between a client and the engine. With `tenant` null (auth off) both directions
// are the identity; client ids are checked against [A-Za-z0-9._-]{1,128} either way.
absl::StatusOr<std::string> EngineSessionId(const Tenant* tenant, absl::string_view client_id);
// The client's view of an engine id; "" for an id outside the tenant's namespace.
std::string ClientSessionId(const Tenant* tenant, absl::string_view engine_id);
bool OwnsSession(const Tenant* tenant, absl::string_view engine_id);
// `status` with the tenant's prefix removed from every session id its message quotes.
absl::Status ClientStatus(const Tenant* tenant, const absl::Status& status);

}  // namespace mnemo::server

#endif  // MNEMO_SERVER_TENANTS_H_
