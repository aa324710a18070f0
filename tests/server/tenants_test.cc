// Tenants without a server: the keys file, key lookup, the session-id namespace, the limits'
// arithmetic, and the request log's lines.
#include "server/tenants.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "nlohmann/json.hpp"
#include "server/request_log.h"

namespace mnemo::server {
namespace {

std::vector<TenantConfig> Parse(const std::string& json) {
  absl::StatusOr<std::vector<TenantConfig>> t = ParseTenantsJson(json, "keys.json");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : std::vector<TenantConfig>{};
}

std::string KeyEntry(const std::string& name, const std::string& key,
                     const std::string& extra = "") {
  return "{\"name\": \"" + name + "\", \"key_sha256\": \"" + Sha256Hex(key) + "\"" + extra + "}";
}

TEST(Sha256HexTest, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(TenantsJsonTest, ParsesNamesKeysLimitsAndDatastores) {
  std::vector<TenantConfig> t =
      Parse("{\"tenants\": [" +
            KeyEntry("team-a", "ka",
                     ", \"max_sessions\": 3, \"max_memory_bytes\": 1000, \"max_concurrent\": 2, "
                     "\"tokens_per_minute\": 600, \"datastores\": [\"wiki\"]") +
            ", " + KeyEntry("team_b", "kb") + "]}");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].name, "team-a");
  EXPECT_EQ(t[0].key_sha256, Sha256Hex("ka"));
  EXPECT_EQ(t[0].limits.max_sessions, 3);
  EXPECT_EQ(t[0].limits.max_memory_bytes, 1000);
  EXPECT_EQ(t[0].limits.max_concurrent, 2);
  EXPECT_EQ(t[0].limits.tokens_per_minute, 600);
  ASSERT_TRUE(t[0].datastores.has_value());
  EXPECT_EQ(*t[0].datastores, std::vector<std::string>{"wiki"});
  EXPECT_EQ(t[1].limits.max_sessions, 0);  // unlimited
  EXPECT_FALSE(t[1].datastores.has_value());
}

TEST(TenantsJsonTest, BadFilesNameWhatIsWrong) {
  struct Case {
    std::string json;
    std::string expect;
  } cases[] = {
      {"not json", "not valid JSON"},
      {"{\"tenant\": []}", "expected {\"tenants\""},
      {"{\"tenants\": []}", "no tenants"},
      {"{\"tenants\": [{\"key_sha256\": \"" + Sha256Hex("k") + "\"}]}", "\"name\""},
      {"{\"tenants\": [{\"name\": \"Team.A\", \"key_sha256\": \"" + Sha256Hex("k") + "\"}]}",
       "name must be"},
      {"{\"tenants\": [{\"name\": \"a\"}]}", "key_sha256"},
      {"{\"tenants\": [{\"name\": \"a\", \"key_sha256\": \"abc\"}]}", "64 hex digits"},
      {"{\"tenants\": [" + KeyEntry("a", "k", ", \"max_sessions\": -1") + "]}", "max_sessions"},
      {"{\"tenants\": [" + KeyEntry("a", "k", ", \"max_concurrent\": \"2\"") + "]}",
       "max_concurrent"},
      {"{\"tenants\": [" + KeyEntry("a", "k", ", \"datastores\": \"wiki\"") + "]}", "datastores"},
      {"{\"tenants\": [" + KeyEntry("a", "k", ", \"max_session\": 1") + "]}",
       "unknown field \"max_session\""},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<TenantConfig>> t = ParseTenantsJson(c.json, "keys.json");
    ASSERT_FALSE(t.ok()) << c.json;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << c.json;
    EXPECT_TRUE(absl::StrContains(t.status().message(), c.expect)) << t.status();
    EXPECT_TRUE(absl::StrContains(t.status().message(), "keys.json")) << t.status();
  }
  EXPECT_EQ(LoadTenantsFile("/nonexistent/keys.json").status().code(), absl::StatusCode::kNotFound);
}

TEST(TenantsTest, AuthenticatesByKeyOnly) {
  Tenants tenants;
  ASSERT_TRUE(tenants.Authenticate(std::nullopt).ok());  // auth off: anonymous
  EXPECT_EQ(*tenants.Authenticate(std::nullopt), nullptr);
  ASSERT_TRUE(tenants
                  .Configure(Parse("{\"tenants\": [" + KeyEntry("a", "key-a") + ", " +
                                   KeyEntry("b", "key-b") + "]}"))
                  .ok());
  EXPECT_EQ((*tenants.Authenticate("Bearer key-a"))->name(), "a");
  EXPECT_EQ((*tenants.Authenticate("Bearer key-b"))->name(), "b");
  for (std::optional<absl::string_view> bad :
       {std::optional<absl::string_view>(), std::optional<absl::string_view>("key-a"),
        std::optional<absl::string_view>("Bearer "),
        std::optional<absl::string_view>("Basic key-a"),
        std::optional<absl::string_view>("Bearer key-c"),
        std::optional<absl::string_view>("Bearer " + Sha256Hex("key-a"))}) {
    absl::StatusOr<std::shared_ptr<Tenant>> t = tenants.Authenticate(bad);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_FALSE(absl::StrContains(t.status().message(), "key-a")) << t.status();
  }
}

TEST(TenantsTest, ReloadKeepsUsageAndDropsRemovedKeys) {
  Tenants tenants;
  ASSERT_TRUE(
      tenants
          .Configure(Parse("{\"tenants\": [" + KeyEntry("a", "old", ", \"max_concurrent\": 1") +
                           ", " + KeyEntry("b", "kb") + "]}"))
          .ok());
  std::shared_ptr<Tenant> a = *tenants.Authenticate("Bearer old");
  std::string limit;
  ASSERT_TRUE(a->Admit(absl::Now(), &limit).ok());
  // A bad reload changes nothing.
  EXPECT_FALSE(tenants
                   .Configure(Parse("{\"tenants\": [" + KeyEntry("a", "x") + ", " +
                                    KeyEntry("a", "y") + "]}"))
                   .ok());
  EXPECT_TRUE(tenants.Authenticate("Bearer old").ok());
  EXPECT_FALSE(tenants
                   .Configure(Parse("{\"tenants\": [" + KeyEntry("a", "x") + ", " +
                                    KeyEntry("c", "x") + "]}"))
                   .ok());
  // New key for a, b removed.
  ASSERT_TRUE(tenants
                  .Configure(Parse("{\"tenants\": [" +
                                   KeyEntry("a", "new", ", \"max_concurrent\": 1") + "]}"))
                  .ok());
  EXPECT_EQ(tenants.Authenticate("Bearer old").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(tenants.Authenticate("Bearer kb").status().code(), absl::StatusCode::kUnauthenticated);
  std::shared_ptr<Tenant> a2 = *tenants.Authenticate("Bearer new");
  EXPECT_EQ(a2.get(), a.get());  // the same live tenant: its call in flight still counts
  absl::Status second = a2->Admit(absl::Now(), &limit);
  EXPECT_EQ(second.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(limit, "max_concurrent");
  a->Release();
  EXPECT_TRUE(a2->Admit(absl::Now(), &limit).ok());
  EXPECT_EQ(tenants.names(), std::vector<std::string>{"a"});
}

TEST(TenantTest, TokensPerMinuteRefillsContinuously) {
  Tenant t("a");
  TenantConfig config;
  config.name = "a";
  config.limits.tokens_per_minute = 600;  // 10 per second
  t.set_config(config);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  std::string limit;
  ASSERT_TRUE(t.Admit(t0, &limit).ok());
  t.Release();
  t.Charge(1000, t0);                                              // overspent by 400
  absl::Status refused = t.Admit(t0 + absl::Seconds(10), &limit);  // +100: still -300
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(limit, "tokens_per_minute");
  EXPECT_TRUE(absl::StrContains(refused.message(), "tokens_per_minute = 600")) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "retry in 31 s")) << refused;
  EXPECT_TRUE(t.Admit(t0 + absl::Seconds(41), &limit).ok());  // +410: 10 left
  t.Release();
  // The budget never exceeds one minute's worth, however long the tenant was idle.
  t.Charge(601, t0 + absl::Hours(5));
  EXPECT_FALSE(t.Admit(t0 + absl::Hours(5), &limit).ok());
}

TEST(TenantTest, DatastoreAllowList) {
  Tenant t("a");
  EXPECT_TRUE(t.MayUseDatastore("wiki"));  // no list: all
  TenantConfig config;
  config.name = "a";
  config.datastores = std::vector<std::string>{"wiki"};
  t.set_config(config);
  EXPECT_TRUE(t.MayUseDatastore("wiki"));
  EXPECT_FALSE(t.MayUseDatastore("code"));
}

TEST(SessionNamespaceTest, PrefixesStripsAndFilters) {
  Tenant a("team-a");
  EXPECT_EQ(*EngineSessionId(&a, "s.1"), "team-a.s.1");
  EXPECT_EQ(*EngineSessionId(nullptr, "s.1"), "s.1");
  EXPECT_EQ(EngineSessionId(&a, "bad id").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EngineSessionId(&a, std::string(129, 'x')).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(EngineSessionId(&a, std::string(128, 'x')).ok());
  EXPECT_EQ(ClientSessionId(&a, "team-a.s.1"), "s.1");
  EXPECT_EQ(ClientSessionId(&a, "team-b.s.1"), "");
  EXPECT_TRUE(OwnsSession(&a, "team-a.x"));
  EXPECT_FALSE(OwnsSession(&a, "team-ab.x"));
  EXPECT_FALSE(OwnsSession(&a, "x"));
  EXPECT_TRUE(OwnsSession(nullptr, "x"));
  absl::Status s = ClientStatus(
      &a, absl::NotFoundError("session 'team-a.s1' not found; nor team-a.s2 (xteam-a.s3)"));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "session 's1' not found; nor s2 (xteam-a.s3)");
}

TEST(RequestLogTest, JsonAndTextLines) {
  RequestRecord r;
  r.start = absl::FromUnixMillis(1764190800123);
  r.method = "Generate";
  r.tenant = "team-a";
  r.session = "s1";
  r.peer = "ipv4:127.0.0.1:5000";
  r.status = absl::InvalidArgumentError("prompt is not valid UTF-8");
  r.tokens_in = 12;
  r.tokens_out = 3;
  r.queue_time = absl::Milliseconds(2);
  r.total_time = absl::Milliseconds(40);
  r.prompt = "secret \xff text";

  const std::string json_line =
      RequestLog(RequestLog::Format::kJson, /*log_prompts=*/false, stderr).Line(r);
  ASSERT_FALSE(json_line.empty());
  EXPECT_EQ(json_line.back(), '\n');
  nlohmann::json j = nlohmann::json::parse(json_line);
  EXPECT_EQ(j["time"], "2025-11-26T21:00:00.123Z");
  EXPECT_EQ(j["method"], "Generate");
  EXPECT_EQ(j["tenant"], "team-a");
  EXPECT_EQ(j["session"], "s1");
  EXPECT_EQ(j["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(j["message"], "prompt is not valid UTF-8");
  EXPECT_EQ(j["tokens_in"], 12);
  EXPECT_EQ(j["tokens_out"], 3);
  EXPECT_DOUBLE_EQ(j["queue_ms"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["total_ms"].get<double>(), 40.0);
  EXPECT_FALSE(j.contains("prompt"));  // never without --log_prompts

  nlohmann::json with_prompt = nlohmann::json::parse(
      RequestLog(RequestLog::Format::kJson, /*log_prompts=*/true, stderr).Line(r));
  EXPECT_TRUE(absl::StartsWith(with_prompt["prompt"].get<std::string>(), "secret "));

  const std::string text = RequestLog(RequestLog::Format::kText, false, stderr).Line(r);
  EXPECT_TRUE(absl::StartsWith(text, "2025-11-26T21:00:00.123Z Generate code=INVALID_ARGUMENT "))
      << text;
  EXPECT_TRUE(absl::StrContains(text, " tenant=team-a session=s1 tokens_in=12 tokens_out=3 "))
      << text;
  EXPECT_TRUE(absl::StrContains(text, " message=\"prompt is not valid UTF-8\"")) << text;
  EXPECT_FALSE(absl::StrContains(text, "secret")) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);

  EXPECT_EQ(RequestLog(RequestLog::Format::kOff, true, stderr).Line(r), "");
  EXPECT_FALSE(RequestLog::ParseFormat("xml").ok());
}

}  // namespace
}  // namespace mnemo::server
