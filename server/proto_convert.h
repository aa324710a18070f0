// Conversions between mnemo.v1 protos and engine value types, plus the edge checks that only
// make sense for the wire format (proto-only fields, pagination). Everything the engine can
// validate (sampling ranges, max_new_tokens cap, UTF-8, empty prompt) is validated there, so
// there is one source of truth; errors here name the proto field the same way.
//
// Pure functions; thread-safe.
#ifndef MNEMO_SERVER_PROTO_CONVERT_H_
#define MNEMO_SERVER_PROTO_CONVERT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/types.h"
#include "mnemo/v1/datastores.pb.h"
#include "mnemo/v1/generation.pb.h"
#include "mnemo/v1/models.pb.h"
#include "mnemo/v1/sessions.pb.h"

namespace mnemo::server {

inline constexpr int kDefaultPageSize = 100;
inline constexpr int kMaxPageSize = 1000;

// Unset optionals take the documented defaults: temperature, top_p and repetition_penalty 1.0,
// seed random, stop_at_eos true. INVALID_ARGUMENT for `logprobs` outside [0, max_top_logprobs],
// an `early_exit.threshold` outside (0, 1], an unknown `early_exit.measure` or bad `knn_lm`
// values (the engine checks the measure against the model).
absl::StatusOr<engine::GenerateOptions> ToGenerateOptions(const v1::GenerateRequest& request,
                                                          int max_top_logprobs);
absl::StatusOr<engine::ScoreOptions> ToScoreOptions(const v1::ScoreRequest& request);
// Unset fields stay unset (the engine resolves them; validation checks the ranges).
engine::RecallRequest ToRecall(const v1::Recall& recall);
engine::CreateSessionOptions ToCreateSessionOptions(const v1::CreateSessionRequest& request);

v1::FinishReason ToProto(engine::FinishReason reason);
void ToProto(const engine::TokenOutput& token, v1::Token* out);
void ToProto(const engine::Usage& usage, v1::Usage* out);
void ToProto(const engine::ScoreResult& result, v1::ScoreResponse* out);
void ToProto(const engine::TokenizeResult& result, v1::TokenizeResponse* out);
void ToProto(const engine::SessionInfo& session, v1::Session* out);
void ToProto(const engine::ModelInfo& model, v1::Model* out);
void ToProto(const engine::DatastoreInfo& datastore, v1::Datastore* out);
engine::AddToDatastoreOptions ToAddToDatastoreOptions(
    const v1::AddToSessionDatastoreRequest& request);

// Appends coalesced tokens and their text delta to a stream chunk.
void AppendTokens(const std::vector<engine::TokenOutput>& tokens, const std::string& text,
                  v1::GenerateResponse* out);

// Pagination over a list sorted by key. A page token is an opaque encoding of the last key of
// the previous page, so deletions between calls neither skip nor repeat entries.
struct PageRequest {
  int size = kDefaultPageSize;
  std::string after;  // keys <= this were on earlier pages; "" = from the start
};
// INVALID_ARGUMENT naming `page_size` (< 0 or > 1000) or `page_token` (not one of ours).
absl::StatusOr<PageRequest> ParsePageRequest(int32_t page_size, const std::string& page_token);
std::string EncodePageToken(const std::string& last_key);

// `sessions` sorted by session_id (as Engine::ListSessions returns them).
absl::Status FillSessionsPage(const std::vector<engine::SessionInfo>& sessions,
                              const v1::ListSessionsRequest& request,
                              v1::ListSessionsResponse* out);
// `datastores` sorted by name.
absl::Status FillDatastoresPage(const std::vector<engine::DatastoreInfo>& datastores,
                                const v1::ListDatastoresRequest& request,
                                v1::ListDatastoresResponse* out);
// `models` sorted by name.
absl::Status FillModelsPage(const std::vector<engine::ModelInfo>& models,
                            const v1::ListModelsRequest& request, v1::ListModelsResponse* out);

}  // namespace mnemo::server

#endif  // MNEMO_SERVER_PROTO_CONVERT_H_
