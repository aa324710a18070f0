// Datastores.* and knn_lm in Score/Generate through gRPC, with a session's private datastore
// (shared datastores are covered by the engine test that builds one).
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/match.h"
#include "tests/server/test_server.h"

namespace mnemo::server::testing {
namespace {

constexpr char kText[] =
    "Sessions can keep a private datastore: text added to it is recalled by kNN-LM.";

class DatastoresTest : public ::testing::Test {
 protected:
  grpc::Status Add(const std::string& session, const std::string& text,
                   v1::AddToSessionDatastoreResponse* out) {
    v1::AddToSessionDatastoreRequest request;
    request.set_session_id(session);
    request.set_text(text);
    return datastores_->AddToSessionDatastore(ContextWithTimeout(absl::Seconds(30)).get(),
                                              request, out);
  }
  grpc::Status Score(const std::string& session, const std::string& datastore, float lambda,
                     v1::ScoreResponse* out) {
    v1::ScoreRequest request;
    request.set_session_id(session);
    request.set_text(kText);
    if (!datastore.empty()) {
      request.mutable_knn_lm()->set_datastore(datastore);
      request.mutable_knn_lm()->set_lambda(lambda);
    }
    return generation_->Score(ContextWithTimeout(absl::Seconds(30)).get(), request, out);
  }

  TestServer server_{{.load = true, .metrics_endpoint = false}};
  std::unique_ptr<v1::Datastores::Stub> datastores_ = server_.datastores();
  std::unique_ptr<v1::Generation::Stub> generation_ = server_.generation();
  std::unique_ptr<v1::Sessions::Stub> sessions_ = server_.sessions();
};

TEST_F(DatastoresTest, ListAndGetWithoutSharedDatastores) {
  v1::ListDatastoresResponse list;
  ASSERT_TRUE(datastores_
                  ->ListDatastores(ContextWithTimeout(absl::Seconds(10)).get(),
                                   v1::ListDatastoresRequest(), &list)
                  .ok());
  EXPECT_EQ(list.datastores_size(), 0);
  v1::GetDatastoreRequest get;
  get.set_name("wiki");
  v1::Datastore info;
  grpc::Status status =
      datastores_->GetDatastore(ContextWithTimeout(absl::Seconds(10)).get(), get, &info);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "loaded: none")) << status.error_message();
  get.set_name("session");
  status = datastores_->GetDatastore(ContextWithTimeout(absl::Seconds(10)).get(), get, &info);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(DatastoresTest, SessionDatastoreAddScoreGenerateAndMetrics) {
  CreateSession(*sessions_, "doc");
  v1::AddToSessionDatastoreResponse added;
  grpc::Status status = Add("doc", kText, &added);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const int64_t n = static_cast<int64_t>(std::string(kText).size());
  EXPECT_EQ(added.entries_added(), n);
  EXPECT_EQ(added.datastore().name(), "session");
  EXPECT_EQ(added.datastore().session_id(), "doc");
  EXPECT_EQ(added.datastore().entries(), n);
  EXPECT_EQ(added.datastore().index_type(), "exact");
  EXPECT_TRUE(absl::StartsWith(added.datastore().model(), kTinyModelName));

  v1::GetDatastoreRequest get;
  get.set_name("session");
  get.set_session_id("doc");
  v1::Datastore info;
  ASSERT_TRUE(
      datastores_->GetDatastore(ContextWithTimeout(absl::Seconds(10)).get(), get, &info).ok());
  EXPECT_EQ(info.entries(), n);

  v1::ScoreResponse plain, mixed;
  ASSERT_TRUE(Score("doc", "", 0, &plain).ok());
  status = Score("doc", "session", 0.5f, &mixed);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_LT(mixed.bits_per_byte(), plain.bits_per_byte() - 0.5);

  v1::GenerateRequest request;
  request.set_session_id("doc");
  request.set_prompt(std::string(kText).substr(0, 30));
  request.set_max_new_tokens(20);
  request.mutable_sampling()->set_temperature(0);
  request.mutable_knn_lm()->set_datastore("session");
  request.mutable_knn_lm()->set_lambda(1.0f);
  request.mutable_knn_lm()->set_k(1);
  const StreamResult result = GenerateAll(*generation_, request);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.text, std::string(kText).substr(30, 20));

  const std::string metrics = server_.server().metrics().TextFormat();
  EXPECT_TRUE(absl::StrContains(metrics, "mnemo_knn_search_seconds_count")) << metrics;
  EXPECT_FALSE(absl::StrContains(metrics, "mnemo_knn_search_seconds_count 0\n"));
  EXPECT_TRUE(absl::StrContains(metrics, "mnemo_datastore_entries{datastore=\"session\"}"));
}

TEST_F(DatastoresTest, BadRequestsNameTheField) {
  CreateSession(*sessions_, "s");
  v1::AddToSessionDatastoreResponse added;
  grpc::Status status = Add("s", "", &added);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "text")) << status.error_message();
  status = Add("s", "\xff\xfe", &added);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  status = Add("nobody", "x", &added);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);

  v1::ScoreResponse scored;
  status = Score("s", "session", 0.5f, &scored);  // nothing added yet
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  status = Score("s", "session", 3.0f, &scored);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "knn_lm.lambda"));
  status = Score("s", "wiki", 0.5f, &scored);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);

  v1::ScoreRequest lambda_only;
  lambda_only.set_text("x");
  lambda_only.mutable_knn_lm()->set_lambda(0.3f);
  status = generation_->Score(ContextWithTimeout(absl::Seconds(10)).get(), lambda_only, &scored);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "knn_lm.datastore"));
}

}  // namespace
}  // namespace mnemo::server::testing
