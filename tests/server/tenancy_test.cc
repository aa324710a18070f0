// Tenants through the real server (in process, loopback): API keys, the cross-tenant matrix
// (every session-touching RPC by another tenant gets NOT_FOUND and changes nothing), per-tenant
// limits, reloads, and per-tenant metrics.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/tenants.h"
#include "tests/server/test_server.h"

namespace mnemo::server {
namespace {

using testing::ContextWithTimeout;
using testing::GenerateAll;
using testing::StreamResult;
using testing::TestServer;

constexpr char kKeyA[] = "key-of-team-a";
constexpr char kKeyB[] = "key-of-team-b";
constexpr char kKeyC[] = "key-of-team-c";

TenantConfig Tenant(const std::string& name, const std::string& key, TenantLimits limits = {}) {
  TenantConfig t;
  t.name = name;
  t.key_sha256 = Sha256Hex(key);
  t.limits = limits;
  return t;
}

std::unique_ptr<grpc::ClientContext> As(const std::string& key,
                                        absl::Duration timeout = absl::Seconds(30)) {
  std::unique_ptr<grpc::ClientContext> context = ContextWithTimeout(timeout);
  if (!key.empty()) context->AddMetadata("authorization", absl::StrCat("Bearer ", key));
  return context;
}

class TenancyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TenantLimits c_limits;
    c_limits.max_sessions = 2;
    c_limits.max_concurrent = 1;
    ASSERT_TRUE(server_.server()
                    .ConfigureTenants({Tenant("team-a", kKeyA), Tenant("team-b", kKeyB),
                                       Tenant("team-c", kKeyC, c_limits)})
                    .ok());
  }

  grpc::Status Create(const std::string& key, const std::string& id, v1::Session* out = nullptr) {
    v1::CreateSessionRequest request;
    request.set_session_id(id);
    v1::Session reply;
    grpc::Status status = sessions_->CreateSession(As(key).get(), request, &reply);
    if (out != nullptr) *out = reply;
    return status;
  }

  StreamResult Generate(const std::string& key, const std::string& session,
                        const std::string& prompt, int max_new_tokens = 4) {
    v1::GenerateRequest request;
    request.set_session_id(session);
    request.set_prompt(prompt);
    request.set_max_new_tokens(max_new_tokens);
    request.mutable_sampling()->set_temperature(0);
    StreamResult result;
    std::unique_ptr<grpc::ClientContext> context = As(key, absl::Seconds(60));
    auto reader = generation_->Generate(context.get(), request);
    v1::GenerateResponse chunk;
    while (reader->Read(&chunk)) {
      result.tokens += chunk.tokens_size();
      result.text += chunk.text();
      result.chunks.push_back(chunk);
    }
    result.status = reader->Finish();
    return result;
  }

  v1::Session Get(const std::string& key, const std::string& id, grpc::Status* status) {
    v1::GetSessionRequest request;
    request.set_session_id(id);
    v1::Session reply;
    *status = sessions_->GetSession(As(key).get(), request, &reply);
    return reply;
  }

  std::vector<std::string> List(const std::string& key) {
    v1::ListSessionsRequest request;
    v1::ListSessionsResponse reply;
    grpc::Status status = sessions_->ListSessions(As(key).get(), request, &reply);
    EXPECT_TRUE(status.ok()) << status.error_message();
    std::vector<std::string> ids;
    for (const v1::Session& s : reply.sessions()) ids.push_back(s.session_id());
    return ids;
  }

  grpc::Status Export(const std::string& key, const std::string& id, std::string* bytes) {
    v1::ExportSessionRequest request;
    request.set_session_id(id);
    std::unique_ptr<grpc::ClientContext> context = As(key);
    auto reader = sessions_->ExportSession(context.get(), request);
    v1::SessionSnapshotChunk chunk;
    while (reader->Read(&chunk)) *bytes += chunk.data();
    return reader->Finish();
  }

  grpc::Status Import(const std::string& key, const std::string& id, const std::string& bytes,
                      v1::Session* out) {
    std::unique_ptr<grpc::ClientContext> context = As(key);
    auto writer = sessions_->ImportSession(context.get(), out);
    v1::ImportSessionRequest request;
    request.set_session_id(id);
    request.set_data(bytes);
    writer->Write(request);
    writer->WritesDone();
    return writer->Finish();
  }

  TestServer server_;
  std::unique_ptr<v1::Generation::Stub> generation_ = server_.generation();
  std::unique_ptr<v1::Sessions::Stub> sessions_ = server_.sessions();
  std::unique_ptr<v1::Datastores::Stub> datastores_ = server_.datastores();
};

TEST_F(TenancyTest, KeysAreRequiredExceptForHealth) {
  v1::CreateSessionRequest request;
  v1::Session reply;
  for (const std::string& auth : {std::string(), std::string("Bearer wrong"),
                                  absl::StrCat("Basic ", kKeyA), std::string(kKeyA)}) {
    std::unique_ptr<grpc::ClientContext> context = ContextWithTimeout(absl::Seconds(10));
    if (!auth.empty()) context->AddMetadata("authorization", auth);
    grpc::Status status = sessions_->CreateSession(context.get(), request, &reply);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << auth;
  }
  StreamResult anonymous = Generate("", "", "hello");
  EXPECT_EQ(anonymous.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(anonymous.tokens, 0);
  v1::ListModelsRequest models_request;
  v1::ListModelsResponse models;
  EXPECT_EQ(server_.models()->ListModels(As("").get(), models_request, &models).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(server_.models()->ListModels(As(kKeyB).get(), models_request, &models).ok());
  // Probes need no key.
  EXPECT_EQ(testing::HealthOf(*server_.health(), "mnemo.v1.Generation"), "SERVING");
}

TEST_F(TenancyTest, CrossTenantMatrixHasNoSuccessfulAccess) {
  // team-a's session "doc", fed and with a private datastore.
  ASSERT_TRUE(Create(kKeyA, "doc").ok());
  ASSERT_TRUE(Generate(kKeyA, "doc", "the owner's words").status.ok());
  {
    v1::AddToSessionDatastoreRequest add;
    add.set_session_id("doc");
    add.set_text("private datastore text");
    v1::AddToSessionDatastoreResponse added;
    grpc::Status status = datastores_->AddToSessionDatastore(As(kKeyA).get(), add, &added);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(added.datastore().session_id(), "doc");
  }
  grpc::Status status;
  const v1::Session before = Get(kKeyA, "doc", &status);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(before.session_id(), "doc");  // the client's id, not the engine's
  std::string exported;
  ASSERT_TRUE(Export(kKeyA, "doc", &exported).ok());

  // Every RPC that names a session, by team-b on team-a's "doc".
  std::map<std::string, std::function<grpc::Status()>> attempts = {
      {"GetSession",
       [&] {
         grpc::Status s;
         Get(kKeyB, "doc", &s);
         return s;
       }},
      {"Generate", [&] { return Generate(kKeyB, "doc", "intrusion").status; }},
      {"Score",
       [&] {
         v1::ScoreRequest r;
         r.set_session_id("doc");
         r.set_text("intrusion");
         v1::ScoreResponse reply;
         return generation_->Score(As(kKeyB).get(), r, &reply);
       }},
      {"ExportSession",
       [&] {
         std::string bytes;
         grpc::Status s = Export(kKeyB, "doc", &bytes);
         EXPECT_TRUE(bytes.empty());
         return s;
       }},
      {"ForkSession",
       [&] {
         v1::ForkSessionRequest r;
         r.set_session_id("doc");
         r.set_new_session_id("stolen");
         v1::Session reply;
         return sessions_->ForkSession(As(kKeyB).get(), r, &reply);
       }},
      {"AddToSessionDatastore",
       [&] {
         v1::AddToSessionDatastoreRequest r;
         r.set_session_id("doc");
         r.set_text("intrusion");
         v1::AddToSessionDatastoreResponse reply;
         return datastores_->AddToSessionDatastore(As(kKeyB).get(), r, &reply);
       }},
      {"GetDatastore",
       [&] {
         v1::GetDatastoreRequest r;
         r.set_name("session");
         r.set_session_id("doc");
         v1::Datastore reply;
         return datastores_->GetDatastore(As(kKeyB).get(), r, &reply);
       }},
      {"DeleteSession",
       [&] {
         v1::DeleteSessionRequest r;
         r.set_session_id("doc");
         v1::DeleteSessionResponse reply;
         return sessions_->DeleteSession(As(kKeyB).get(), r, &reply);
       }},
  };
  int successes = 0;
  std::string table = "| RPC by team-b on team-a's session | status |\n|---|---|\n";
  for (const auto& [rpc, attempt] : attempts) {
    const grpc::Status s = attempt();
    if (s.ok()) ++successes;
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << rpc << ": " << s.error_message();
    // Indistinguishable from a session that never existed: no tenant name, no engine id.
    EXPECT_FALSE(absl::StrContains(s.error_message(), "team-a"))
        << rpc << ": " << s.error_message();
    absl::StrAppend(&table, "| ", rpc, " | ", s.error_code(), " ", s.error_message(), " |\n");
  }
  // Lists show only one's own sessions.
  EXPECT_EQ(List(kKeyB), std::vector<std::string>{});
  EXPECT_EQ(List(kKeyA), std::vector<std::string>{"doc"});
  std::printf("%s0 of %zu cross-tenant attempts succeeded\n", table.c_str(), attempts.size());
  EXPECT_EQ(successes, 0);

  // team-a's session is exactly as it was.
  const v1::Session after = Get(kKeyA, "doc", &status);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(after.tokens_seen(), before.tokens_seen());
  EXPECT_EQ(after.memory().knn_entries(), before.memory().knn_entries());

  // The same id is free for team-b: its own, separate session.
  v1::Session b_doc;
  ASSERT_TRUE(Create(kKeyB, "doc", &b_doc).ok());
  EXPECT_EQ(b_doc.session_id(), "doc");
  EXPECT_EQ(b_doc.tokens_seen(), 0);
  // team-b importing team-a's exported bytes gets its own copy, under its own namespace; the
  // original is untouched.
  v1::Session imported;
  status = Import(kKeyB, "", exported, &imported);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::ALREADY_EXISTS) << status.error_message();
  status = Import(kKeyB, "copy", exported, &imported);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(imported.session_id(), "copy");
  EXPECT_EQ(imported.tokens_seen(), before.tokens_seen());
  EXPECT_EQ(List(kKeyB), (std::vector<std::string>{"copy", "doc"}));
  EXPECT_EQ(List(kKeyA), std::vector<std::string>{"doc"});
  // Without an id, an import keeps the exported id's own part, in the importer's namespace.
  v1::DeleteSessionRequest del;
  del.set_session_id("doc");
  v1::DeleteSessionResponse deleted;
  ASSERT_TRUE(sessions_->DeleteSession(As(kKeyB).get(), del, &deleted).ok());
  status = Import(kKeyB, "", exported, &imported);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(imported.session_id(), "doc");
  EXPECT_EQ(Get(kKeyA, "doc", &status).tokens_seen(), before.tokens_seen());
}

TEST_F(TenancyTest, GeneratedIdsAreRandomAndInTheCallersNamespace) {
  v1::Session first, second;
  ASSERT_TRUE(Create(kKeyA, "", &first).ok());
  ASSERT_TRUE(Create(kKeyA, "", &second).ok());
  EXPECT_EQ(first.session_id().size(), 32u);  // 128 bits, hex
  EXPECT_NE(first.session_id(), second.session_id());
  EXPECT_EQ(first.session_id().find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(List(kKeyB), std::vector<std::string>{});
  grpc::Status status;
  Get(kKeyA, first.session_id(), &status);
  EXPECT_TRUE(status.ok()) << status.error_message();
  v1::ForkSessionRequest fork;
  fork.set_session_id(first.session_id());
  v1::Session forked;
  ASSERT_TRUE(sessions_->ForkSession(As(kKeyA).get(), fork, &forked).ok());
  EXPECT_EQ(forked.session_id().size(), 32u);
  EXPECT_EQ(List(kKeyA).size(), 3u);
}

TEST_F(TenancyTest, LimitsAreNamedAndPerTenant) {
  // max_sessions = 2 for team-c.
  ASSERT_TRUE(Create(kKeyC, "one").ok());
  ASSERT_TRUE(Create(kKeyC, "two").ok());
  grpc::Status third = Create(kKeyC, "three");
  EXPECT_EQ(third.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(third.error_message(), "max_sessions")) << third.error_message();
  EXPECT_TRUE(Create(kKeyA, "three").ok());  // another tenant is not affected

  // max_concurrent = 1 for team-c: a second call while a long stream runs is refused; team-a
  // is not slowed by team-c's limit.
  v1::GenerateRequest request;
  request.set_prompt("a long one");
  request.set_max_new_tokens(4000);
  request.mutable_sampling()->set_temperature(0);
  std::unique_ptr<grpc::ClientContext> context = As(kKeyC, absl::Seconds(60));
  auto reader = generation_->Generate(context.get(), request);
  v1::GenerateResponse chunk;
  ASSERT_TRUE(reader->Read(&chunk));  // running now
  StreamResult refused = Generate(kKeyC, "", "second");
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(refused.status.error_message(), "max_concurrent"))
      << refused.status.error_message();
  EXPECT_TRUE(Generate(kKeyA, "", "meanwhile").status.ok());
  context->TryCancel();
  while (reader->Read(&chunk)) {
  }
  reader->Finish();

  const std::string metrics = server_.server().metrics().TextFormat();
  EXPECT_TRUE(absl::StrContains(
      metrics, "mnemo_tenant_rejections_total{limit=\"max_sessions\",tenant=\"team-c\"} 1"))
      << metrics;
  EXPECT_TRUE(absl::StrContains(
      metrics, "mnemo_tenant_rejections_total{limit=\"max_concurrent\",tenant=\"team-c\"} 1"));
  EXPECT_TRUE(
      absl::StrContains(metrics, "mnemo_tenant_requests_total{code=\"OK\",tenant=\"team-a\"}"));
  EXPECT_TRUE(
      absl::StrContains(metrics, "mnemo_tenant_tokens_total{direction=\"out\",tenant=\"team-a\"}"));
}

TEST_F(TenancyTest, TokensPerMinuteRefusesOnceSpent) {
  TenantLimits limits;
  limits.tokens_per_minute = 60;
  ASSERT_TRUE(server_.server()
                  .ConfigureTenants({Tenant("team-a", kKeyA), Tenant("team-b", kKeyB, limits)})
                  .ok());
  int64_t charged = 0;
  grpc::Status refused;
  for (int i = 0; i < 20 && refused.ok(); ++i) {
    StreamResult r = Generate(kKeyB, "", "some prompt text", /*max_new_tokens=*/8);
    if (!r.status.ok()) {
      refused = r.status;
      break;
    }
    const v1::Usage& usage = r.chunks.back().usage();
    charged += usage.prompt_tokens() + usage.generated_tokens();
  }
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(refused.error_message(), "tokens_per_minute = 60"))
      << refused.error_message();
  EXPECT_GE(charged, 60);       // refused only once the minute's budget was spent
  EXPECT_LT(charged, 60 + 40);  // and not much later (one call's tokens at most)
  EXPECT_TRUE(Generate(kKeyA, "", "unlimited").status.ok());
}

TEST_F(TenancyTest, ReloadSwapsKeysAndKeepsSessions) {
  ASSERT_TRUE(Create(kKeyA, "kept").ok());
  ASSERT_TRUE(server_.server()
                  .ConfigureTenants({Tenant("team-a", "rotated-key"), Tenant("team-b", kKeyB)})
                  .ok());
  EXPECT_EQ(Create(kKeyA, "x").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Create(kKeyC, "x").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(List("rotated-key"), std::vector<std::string>{"kept"});
  // A bad configuration changes nothing.
  EXPECT_FALSE(
      server_.server().ConfigureTenants({Tenant("team-a", kKeyA), Tenant("team-a", kKeyB)}).ok());
  EXPECT_EQ(List("rotated-key"), std::vector<std::string>{"kept"});
}

TEST_F(TenancyTest, SharedDatastoreAllowListHidesOthers) {
  // The tiny test server loads no shared datastore: a restricted tenant naming one gets the
  // same NOT_FOUND as for a name that is not loaded, and an empty list.
  TenantConfig b = Tenant("team-b", kKeyB);
  b.datastores = std::vector<std::string>{};
  ASSERT_TRUE(server_.server().ConfigureTenants({Tenant("team-a", kKeyA), b}).ok());
  v1::GenerateRequest request;
  request.set_prompt("x");
  request.mutable_knn_lm()->set_datastore("wiki");
  std::unique_ptr<grpc::ClientContext> context = As(kKeyB);
  auto reader = generation_->Generate(context.get(), request);
  v1::GenerateResponse chunk;
  while (reader->Read(&chunk)) {
  }
  grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "\"wiki\" is not loaded"))
      << status.error_message();
  v1::ListDatastoresRequest list;
  v1::ListDatastoresResponse listed;
  ASSERT_TRUE(datastores_->ListDatastores(As(kKeyB).get(), list, &listed).ok());
  EXPECT_EQ(listed.datastores_size(), 0);
}

TEST(TenancyFairShareTest, AFloodHoldsOnlyItsShareOfTheRunningSlots) {
  testing::TestServerOptions options;
  options.load = false;
  TestServer server(options);
  engine::EngineConfig config = testing::TinyEngineConfig();
  config.max_running = 2;
  ASSERT_TRUE(server.server().LoadEngine(config).ok());
  ASSERT_TRUE(
      server.server().ConfigureTenants({Tenant("team-a", kKeyA), Tenant("team-b", kKeyB)}).ok());
  std::unique_ptr<v1::Generation::Stub> generation = server.generation();

  // team-a's two long streams take both running slots.
  struct Open {
    std::unique_ptr<grpc::ClientContext> context;
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader;
  };
  auto open = [&](const std::string& key, int max_new_tokens) {
    v1::GenerateRequest request;
    request.set_prompt("flood");
    request.set_max_new_tokens(max_new_tokens);
    request.mutable_sampling()->set_temperature(0);
    Open o;
    o.context = As(key, absl::Seconds(120));
    o.reader = generation->Generate(o.context.get(), request);
    return o;
  };
  std::vector<Open> flood;
  for (int i = 0; i < 2; ++i) {
    flood.push_back(open(kKeyA, 4000));
    v1::GenerateResponse chunk;
    ASSERT_TRUE(flood.back().reader->Read(&chunk));
  }
  // A third from team-a is refused, naming the fair share...
  Open third = open(kKeyA, 4);
  v1::GenerateResponse chunk;
  while (third.reader->Read(&chunk)) {
  }
  grpc::Status refused = third.reader->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(refused.error_message(), "fair_share")) << refused.error_message();
  // ...while team-b's call is admitted; it runs as soon as one of the flood's calls ends.
  Open b = open(kKeyB, 4);
  flood[0].context->TryCancel();
  int b_tokens = 0;
  while (b.reader->Read(&chunk)) b_tokens += chunk.tokens_size();
  grpc::Status b_status = b.reader->Finish();
  EXPECT_TRUE(b_status.ok()) << b_status.error_message();
  EXPECT_EQ(b_tokens, 4);
  for (Open& o : flood) {
    o.context->TryCancel();
    while (o.reader->Read(&chunk)) {
    }
    o.reader->Finish();
  }
  EXPECT_TRUE(
      absl::StrContains(server.server().metrics().TextFormat(),
                        "mnemo_tenant_rejections_total{limit=\"fair_share\",tenant=\"team-a\"} 1"));
}

}  // namespace
}  // namespace mnemo::server
