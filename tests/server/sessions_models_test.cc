// Sessions.* and Models.* against an in-process server with a tiny random model.
#include <gtest/gtest.h>

#include <grpcpp/generic/generic_stub.h>

#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "tests/server/test_server.h"

namespace mnemo::server::testing {
namespace {

class SessionsModelsTest : public ::testing::Test {
 protected:
  grpc::Status Get(const std::string& id, v1::Session* out) {
    v1::GetSessionRequest request;
    request.set_session_id(id);
    return sessions_->GetSession(ContextWithTimeout(absl::Seconds(10)).get(), request, out);
  }
  grpc::Status Delete(const std::string& id) {
    v1::DeleteSessionRequest request;
    request.set_session_id(id);
    v1::DeleteSessionResponse response;
    return sessions_->DeleteSession(ContextWithTimeout(absl::Seconds(10)).get(), request,
                                    &response);
  }
  grpc::Status List(int page_size, const std::string& token, v1::ListSessionsResponse* out) {
    v1::ListSessionsRequest request;
    request.set_page_size(page_size);
    request.set_page_token(token);
    return sessions_->ListSessions(ContextWithTimeout(absl::Seconds(10)).get(), request, out);
  }

  TestServer server_;
  std::unique_ptr<v1::Sessions::Stub> sessions_ = server_.sessions();
  std::unique_ptr<v1::Models::Stub> models_ = server_.models();
};

TEST_F(SessionsModelsTest, CreateGetListDelete) {
  const v1::Session created = CreateSession(*sessions_, "alpha");
  EXPECT_EQ(created.session_id(), "alpha");
  EXPECT_EQ(created.model(), kTinyModelName);
  EXPECT_EQ(created.tokens_seen(), 0);
  EXPECT_GT(created.create_time(), 0);
  EXPECT_FALSE(created.busy());

  const v1::Session generated = CreateSession(*sessions_, "");
  EXPECT_FALSE(generated.session_id().empty());

  v1::CreateSessionRequest duplicate;
  duplicate.set_session_id("alpha");
  v1::Session ignored;
  grpc::Status status =
      sessions_->CreateSession(ContextWithTimeout(absl::Seconds(10)).get(), duplicate, &ignored);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::ALREADY_EXISTS) << status.error_message();

  v1::CreateSessionRequest bad;
  bad.set_session_id("not a valid id!");
  status = sessions_->CreateSession(ContextWithTimeout(absl::Seconds(10)).get(), bad, &ignored);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_TRUE(absl::StrContains(status.error_message(), "session_id")) << status.error_message();

  // Memory shows up after use.
  v1::ScoreRequest score;
  score.set_session_id("alpha");
  score.set_text("some text for the memory");
  score.set_update_memory(true);
  v1::ScoreResponse scored;
  auto generation = server_.generation();
  status = generation->Score(ContextWithTimeout(absl::Seconds(30)).get(), score, &scored);
  ASSERT_TRUE(status.ok()) << status.error_message();

  v1::Session got;
  status = Get("alpha", &got);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(got.tokens_seen(), static_cast<int64_t>(score.text().size()));
  EXPECT_GT(got.memory().xl_tokens(), 0);
  EXPECT_GT(got.memory().bytes(), 0);

  v1::ListSessionsResponse listed;
  status = List(0, "", &listed);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(listed.sessions_size(), 2);
  EXPECT_TRUE(listed.next_page_token().empty());

  EXPECT_TRUE(Delete("alpha").ok());
  EXPECT_EQ(Get("alpha", &got).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Delete("alpha").error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(SessionsModelsTest, ListSessionsPaginates) {
  std::set<std::string> expected;
  for (int i = 0; i < 5; ++i) {
    expected.insert(CreateSession(*sessions_, absl::StrCat("page-", i)).session_id());
  }
  std::vector<std::string> seen;
  std::string token;
  int pages = 0;
  do {
    v1::ListSessionsResponse page;
    grpc::Status status = List(2, token, &page);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_LE(page.sessions_size(), 2);
    for (const v1::Session& s : page.sessions()) seen.push_back(s.session_id());
    token = page.next_page_token();
    ASSERT_LT(++pages, 10);
  } while (!token.empty());
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()), expected);
  EXPECT_EQ(seen.size(), expected.size());
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));

  v1::ListSessionsResponse page;
  grpc::Status status = List(1001, "", &page);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "page_size")) << status.error_message();
  status = List(-1, "", &page);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  status = List(2, "garbage!", &page);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "page_token")) << status.error_message();
}

TEST_F(SessionsModelsTest, UnknownSessionIsNotFound) {
  v1::Session got;
  grpc::Status status = Get("never-created", &got);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "never-created")) << status.error_message();
  EXPECT_EQ(Delete("never-created").error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(SessionsModelsTest, ListAndGetModels) {
  v1::ListModelsRequest request;
  v1::ListModelsResponse listed;
  grpc::Status status =
      models_->ListModels(ContextWithTimeout(absl::Seconds(10)).get(), request, &listed);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(listed.models_size(), 1);
  const v1::Model& model = listed.models(0);
  EXPECT_EQ(model.name(), kTinyModelName);
  EXPECT_EQ(model.layers(), 2);
  EXPECT_EQ(model.d_model(), 64);
  EXPECT_EQ(model.heads(), 2);
  EXPECT_EQ(model.vocab_size(), 259);
  EXPECT_GT(model.parameters(), 0);
  EXPECT_EQ(model.memory().seg_len(), 16);
  EXPECT_EQ(model.memory().mem_len(), 32);
  EXPECT_EQ(model.memory().cmem_len(), 8);
  EXPECT_EQ(model.device(), "cpu");
  EXPECT_EQ(model.family(), "mnemo-xl");
  EXPECT_EQ(model.tokenizer(), "byte");
  EXPECT_EQ(model.dtype(), "float32");
  EXPECT_EQ(model.weight_dtype(), "float32");
  EXPECT_EQ(model.window(), 32);  // mem_len
  EXPECT_EQ(model.sink_tokens(), 0);
  EXPECT_TRUE(listed.next_page_token().empty());

  v1::GetModelRequest get;
  get.set_name(kTinyModelName);
  v1::Model got;
  status = models_->GetModel(ContextWithTimeout(absl::Seconds(10)).get(), get, &got);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(got.SerializeAsString(), model.SerializeAsString());

  get.set_name("no-such-model");
  status = models_->GetModel(ContextWithTimeout(absl::Seconds(10)).get(), get, &got);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);

  request.set_page_size(1001);
  status = models_->ListModels(ContextWithTimeout(absl::Seconds(10)).get(), request, &listed);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "page_size")) << status.error_message();
}

// Sends `bytes` as the request of a unary method, bypassing protobuf (which will not build a
// string field holding invalid UTF-8; other clients can).
grpc::Status RawUnary(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                      const std::string& bytes) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

TEST_F(SessionsModelsTest, NonUtf8IdsAreInvalidArgumentNamingTheField) {
  const std::string bad = "id\xff";
  // Field 1 (session_id / name) or 2 (page_token), length-delimited.
  const std::string field1 = std::string("\x0a") + static_cast<char>(bad.size()) + bad;
  const std::string field2 = std::string("\x12") + static_cast<char>(bad.size()) + bad;
  struct Case {
    const char* method;
    std::string bytes;
    const char* field;
  };
  const Case cases[] = {
      {"/mnemo.v1.Sessions/CreateSession", field1, "session_id"},
      {"/mnemo.v1.Sessions/GetSession", field1, "session_id"},
      {"/mnemo.v1.Sessions/DeleteSession", field1, "session_id"},
      {"/mnemo.v1.Sessions/ListSessions", field2, "page_token"},
      {"/mnemo.v1.Sessions/ForkSession", field1, "session_id"},
      {"/mnemo.v1.Sessions/ForkSession", field2, "new_session_id"},
      {"/mnemo.v1.Models/GetModel", field1, "name"},
      {"/mnemo.v1.Models/ListModels", field2, "page_token"},
  };
  for (const Case& c : cases) {
    const grpc::Status status = RawUnary(server_.channel(), c.method, c.bytes);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.method;
    EXPECT_EQ(status.error_message(), std::string(c.field) + " is not valid UTF-8") << c.method;
  }
  // Well-formed raw requests still work through the same path.
  EXPECT_TRUE(RawUnary(server_.channel(), "/mnemo.v1.Sessions/ListSessions", "").ok());
}

}  // namespace
}  // namespace mnemo::server::testing
