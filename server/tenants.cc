#include "server/tenants.h"

#include <openssl/evp.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "engine/session/session_store.h"
#include "nlohmann/json.hpp"

namespace mnemo::server {
namespace {

using Json = nlohmann::json;

absl::Status CheckName(absl::string_view name, absl::string_view where) {
  const bool ok =
      !name.empty() && name.size() <= 63 && std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
      });
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      where, ": name must be 1 to 63 of [a-z0-9_-], got \"", absl::CHexEscape(name), "\""));
}

absl::StatusOr<int64_t> Limit(const Json& entry, const char* key, absl::string_view where) {
  if (!entry.contains(key) || entry[key].is_null()) return 0;
  const Json& v = entry[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", key, " must be a non-negative integer (0 = unlimited)"));
  }
  return v.get<int64_t>();
}

absl::StatusOr<TenantConfig> ParseTenant(const Json& entry, absl::string_view where) {
  if (!entry.is_object())
    return absl::InvalidArgumentError(absl::StrCat(where, " is not an object"));
  static constexpr const char* kKnown[] = {
      "name",           "key_sha256",        "max_sessions", "max_memory_bytes",
      "max_concurrent", "tokens_per_minute", "datastores"};
  for (const auto& [key, value] : entry.items()) {
    if (std::find(std::begin(kKnown), std::end(kKnown), key) == std::end(kKnown)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": unknown field \"", key, "\" (known: ", absl::StrJoin(kKnown, ", "), ")"));
    }
  }
  TenantConfig t;
  if (!entry.contains("name") || !entry["name"].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": \"name\" (a string) is required"));
  }
  t.name = entry["name"].get<std::string>();
  if (absl::Status s = CheckName(t.name, where); !s.ok()) return s;
  const std::string at = absl::StrCat(where, " (", t.name, ")");
  if (!entry.contains("key_sha256") || !entry["key_sha256"].is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(at, ": \"key_sha256\" (hex SHA-256 of the key) is required"));
  }
  t.key_sha256 = absl::AsciiStrToLower(entry["key_sha256"].get<std::string>());
  if (t.key_sha256.size() != 64 ||
      !std::all_of(t.key_sha256.begin(), t.key_sha256.end(), absl::ascii_isxdigit)) {
    return absl::InvalidArgumentError(
        absl::StrCat(at, ": key_sha256 must be 64 hex digits (e.g. printf %s KEY | sha256sum)"));
  }
  struct Field {
    const char* key;
    int64_t* out;
  } fields[] = {{"max_sessions", &t.limits.max_sessions},
                {"max_memory_bytes", &t.limits.max_memory_bytes},
                {"max_concurrent", &t.limits.max_concurrent},
                {"tokens_per_minute", &t.limits.tokens_per_minute}};
  for (const Field& f : fields) {
    absl::StatusOr<int64_t> v = Limit(entry, f.key, at);
    if (!v.ok()) return v.status();
    *f.out = *v;
  }
  if (entry.contains("datastores")) {
    const Json& names = entry["datastores"];
    if (!names.is_array() ||
        !std::all_of(names.begin(), names.end(), [](const Json& n) { return n.is_string(); })) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, ": datastores must be an array of shared datastore names"));
    }
    t.datastores.emplace();
    for (const Json& n : names) t.datastores->push_back(n.get<std::string>());
  }
  return t;
}

}  // namespace

absl::StatusOr<std::vector<TenantConfig>> ParseTenantsJson(absl::string_view json,
                                                           absl::string_view origin) {
  Json doc = Json::parse(json.begin(), json.end(), /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": not valid JSON"));
  }
  if (!doc.is_object() || !doc.contains("tenants") || !doc["tenants"].is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": expected {\"tenants\": [{\"name\": ..., \"key_sha256\": ...}]}"));
  }
  std::vector<TenantConfig> tenants;
  for (size_t i = 0; i < doc["tenants"].size(); ++i) {
    absl::StatusOr<TenantConfig> t =
        ParseTenant(doc["tenants"][i], absl::StrCat(origin, ": tenants[", i, "]"));
    if (!t.ok()) return t.status();
    tenants.push_back(*std::move(t));
  }
  if (tenants.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin,
                     ": no tenants (an empty file would lock every client out; omit --auth_keys to "
                     "run without keys)"));
  }
  return tenants;
}

absl::StatusOr<std::vector<TenantConfig>> LoadTenantsFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("--auth_keys: cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  return ParseTenantsJson(text.str(), path);
}

std::string Sha256Hex(absl::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * length);
  for (unsigned int i = 0; i < length; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 15]);
  }
  return hex;
}

Tenant::Tenant(std::string name) : name_(std::move(name)), prefix_(name_ + ".") {}

TenantConfig Tenant::config() const {
  absl::MutexLock lock(&mu_);
  return config_;
}

void Tenant::set_config(TenantConfig config) {
  absl::MutexLock lock(&mu_);
  if (config.limits.tokens_per_minute != config_.limits.tokens_per_minute) {
    token_budget_ = static_cast<double>(config.limits.tokens_per_minute);  // a full minute
    refilled_at_ = absl::InfinitePast();
  }
  config_ = std::move(config);
}

void Tenant::RefillLocked(absl::Time now) {
  const double rate = static_cast<double>(config_.limits.tokens_per_minute);
  if (refilled_at_ != absl::InfinitePast() && now > refilled_at_) {
    token_budget_ =
        std::min(rate, token_budget_ + rate * absl::ToDoubleMinutes(now - refilled_at_));
  }
  refilled_at_ = now;
}

absl::Status Tenant::Admit(absl::Time now, std::string* limit) {
  absl::MutexLock lock(&mu_);
  const TenantLimits& limits = config_.limits;
  if (limits.max_concurrent > 0 && in_flight_ >= limits.max_concurrent) {
    *limit = "max_concurrent";
    return absl::ResourceExhaustedError(absl::StrCat(
        "tenant '", name_, "' is at its limit max_concurrent = ", limits.max_concurrent,
        " requests in flight; retry when one finishes"));
  }
  if (limits.tokens_per_minute > 0) {
    RefillLocked(now);
    if (token_budget_ <= 0) {
      *limit = "tokens_per_minute";
      const double wait_s = (1 - token_budget_) * 60.0 / limits.tokens_per_minute;
      return absl::ResourceExhaustedError(absl::StrCat(
          "tenant '", name_, "' is over its limit tokens_per_minute = ", limits.tokens_per_minute,
          "; retry in ", static_cast<int64_t>(wait_s) + 1, " s"));
    }
  }
  ++in_flight_;
  return absl::OkStatus();
}

void Tenant::Release() {
  absl::MutexLock lock(&mu_);
  --in_flight_;
}

void Tenant::Charge(int64_t tokens, absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (config_.limits.tokens_per_minute <= 0 || tokens <= 0) return;
  RefillLocked(now);
  token_budget_ -= static_cast<double>(tokens);
}

int64_t Tenant::in_flight() const {
  absl::MutexLock lock(&mu_);
  return in_flight_;
}

bool Tenant::MayUseDatastore(absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  if (!config_.datastores.has_value()) return true;
  return std::find(config_.datastores->begin(), config_.datastores->end(), name) !=
         config_.datastores->end();
}

absl::Status Tenants::Configure(std::vector<TenantConfig> tenants) {
  absl::flat_hash_map<std::string, std::shared_ptr<Tenant>> by_key, by_name;
  absl::MutexLock lock(&mu_);
  for (TenantConfig& config : tenants) {
    if (by_name.contains(config.name)) {
      return absl::InvalidArgumentError(absl::StrCat("tenant '", config.name, "' appears twice"));
    }
    if (by_key.contains(config.key_sha256)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tenant '", config.name, "' has the same key as another tenant"));
    }
    auto existing = by_name_.find(config.name);
    std::shared_ptr<Tenant> tenant =
        existing != by_name_.end() ? existing->second : std::make_shared<Tenant>(config.name);
    by_name[config.name] = tenant;
    by_key[config.key_sha256] = tenant;
  }
  // Validated: only now touch the live tenants.
  for (TenantConfig& config : tenants) by_name[config.name]->set_config(std::move(config));
  by_key_ = std::move(by_key);
  by_name_ = std::move(by_name);
  enabled_ = true;
  return absl::OkStatus();
}

bool Tenants::enabled() const {
  absl::MutexLock lock(&mu_);
  return enabled_;
}

absl::StatusOr<std::shared_ptr<Tenant>> Tenants::Authenticate(
    std::optional<absl::string_view> authorization) const {
  absl::MutexLock lock(&mu_);
  if (!enabled_) return std::shared_ptr<Tenant>();
  if (!authorization.has_value()) {
    return absl::UnauthenticatedError(
        "this server requires an API key: send metadata 'authorization: Bearer KEY'");
  }
  absl::string_view value = *authorization;
  if (!absl::ConsumePrefix(&value, "Bearer ") || value.empty()) {
    return absl::UnauthenticatedError("the authorization metadata must be 'Bearer KEY'");
  }
  // Looked up by the key's hash: the table never holds keys, and the time taken does not
  // depend on how much of a guess matches a real key.
  auto it = by_key_.find(Sha256Hex(value));
  if (it == by_key_.end()) return absl::UnauthenticatedError("unknown API key");
  return it->second;
}

std::vector<std::string> Tenants::names() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> names;
  for (const auto& [name, tenant] : by_name_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

absl::Status Tenants::AdmitModelCall(const Tenant& tenant, int64_t capacity) {
  absl::MutexLock lock(&share_mu_);
  int64_t& mine = model_calls_[tenant.name()];
  if (capacity > 0 && model_calls_total_ >= capacity) {
    int64_t active = mine == 0 ? 1 : 0;
    for (const auto& [name, calls] : model_calls_) active += calls > 0 ? 1 : 0;
    const int64_t share = (capacity + active - 1) / active;
    if (mine >= share) {
      return absl::ResourceExhaustedError(
          absl::StrCat("tenant '", tenant.name(), "' holds its fair_share of the server: ", mine,
                       " of ", capacity, " running slots while ", active,
                       " tenants have calls in flight; retry when one of its calls ends"));
    }
  }
  ++mine;
  ++model_calls_total_;
  return absl::OkStatus();
}

void Tenants::ReleaseModelCall(const Tenant& tenant) {
  absl::MutexLock lock(&share_mu_);
  --model_calls_[tenant.name()];
  --model_calls_total_;
}

absl::StatusOr<std::string> EngineSessionId(const Tenant* tenant, absl::string_view client_id) {
  if (absl::Status s =
          session::SessionStore::ValidateId(client_id, session::SessionStore::kMaxIdLength);
      !s.ok()) {
    return s;
  }
  if (tenant == nullptr) return std::string(client_id);
  return absl::StrCat(tenant->prefix(), client_id);
}

bool OwnsSession(const Tenant* tenant, absl::string_view engine_id) {
  return tenant == nullptr || absl::StartsWith(engine_id, tenant->prefix());
}

std::string ClientSessionId(const Tenant* tenant, absl::string_view engine_id) {
  if (tenant == nullptr) return std::string(engine_id);
  if (!absl::ConsumePrefix(&engine_id, tenant->prefix())) return "";
  return std::string(engine_id);
}

absl::Status ClientStatus(const Tenant* tenant, const absl::Status& status) {
  if (tenant == nullptr || status.ok()) return status;
  absl::string_view message = status.message();
  const std::string& prefix = tenant->prefix();
  auto id_char = [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  };
  // Drops the prefix where it starts an id (not inside a longer word).
  std::string out;
  size_t i = 0;
  while (i < message.size()) {
    if (message.substr(i, prefix.size()) == prefix && (i == 0 || !id_char(message[i - 1]))) {
      i += prefix.size();
      continue;
    }
    out.push_back(message[i++]);
  }
  return absl::Status(status.code(), out);
}

}  // namespace mnemo::server
