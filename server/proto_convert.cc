#include "server/proto_convert.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace mnemo::server {
namespace {

absl::Status InvalidArgument(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", why));
}

// Fields a request sets are range-checked here; the engine checks again after filling in the
// datastore's defaults, and resolves the name (NOT_FOUND for a datastore it has not loaded).
absl::StatusOr<std::optional<engine::KnnLmOptions>> ToKnnLmOptions(const v1::KnnLm& knn) {
  if (knn.has_lambda() && !(knn.lambda() >= 0.0f && knn.lambda() <= 1.0f)) {
    return InvalidArgument("knn_lm.lambda", absl::StrCat("must be in [0, 1], got ", knn.lambda()));
  }
  if (knn.k() < 0) return InvalidArgument("knn_lm.k", absl::StrCat("must be >= 0, got ", knn.k()));
  if (knn.has_temperature() && (!(knn.temperature() > 0.0f) || std::isinf(knn.temperature()))) {
    return InvalidArgument("knn_lm.temperature",
                           absl::StrCat("must be a finite number > 0, got ", knn.temperature()));
  }
  if (knn.datastore().empty()) {
    if (knn.has_lambda() || knn.k() != 0 || knn.has_temperature()) {
      return InvalidArgument("knn_lm.datastore",
                             "must name a datastore when lambda, k or temperature is set");
    }
    return std::nullopt;
  }
  engine::KnnLmOptions options;
  options.datastore = knn.datastore();
  if (knn.has_lambda()) options.lambda = knn.lambda();
  options.k = knn.k();
  if (knn.has_temperature()) options.temperature = knn.temperature();
  return options;
}

// EXIT_MEASURE_UNSPECIFIED = nullopt (the model's default); an unknown value (a newer client's
// enum, or garbage) is INVALID_ARGUMENT. Whether the model has the measure (a classifier, a
// calibrated threshold) is the engine's check.
absl::StatusOr<std::optional<model::ExitMeasure>> ToExitMeasure(int measure) {
  switch (measure) {
    case v1::EXIT_MEASURE_UNSPECIFIED: return std::nullopt;
    case v1::EXIT_MEASURE_SOFTMAX_RESPONSE: return model::ExitMeasure::kSoftmaxResponse;
    case v1::EXIT_MEASURE_HIDDEN_SATURATION: return model::ExitMeasure::kHiddenSaturation;
    case v1::EXIT_MEASURE_CLASSIFIER: return model::ExitMeasure::kClassifier;
    default:
      return InvalidArgument("early_exit.measure", absl::StrCat("has unknown value ", measure));
  }
}

// Selects the page of `items` (sorted by `key`) that `request` asks for.
template <typename T, typename KeyFn>
absl::StatusOr<std::pair<std::vector<const T*>, std::string>> SelectPage(
    const std::vector<T>& items, int32_t page_size, const std::string& page_token, KeyFn key) {
  absl::StatusOr<PageRequest> page = ParsePageRequest(page_size, page_token);
  if (!page.ok()) return page.status();
  auto it = items.begin();
  if (!page->after.empty()) {
    it = std::upper_bound(
        items.begin(), items.end(), page->after,
        [&](const std::string& after, const T& item) { return after < key(item); });
  }
  std::vector<const T*> selected;
  for (; it != items.end() && static_cast<int>(selected.size()) < page->size; ++it) {
    selected.push_back(&*it);
  }
  std::string next;
  if (it != items.end() && !selected.empty()) next = EncodePageToken(key(*selected.back()));
  return std::make_pair(std::move(selected), std::move(next));
}

}  // namespace

absl::StatusOr<engine::GenerateOptions> ToGenerateOptions(const v1::GenerateRequest& request,
                                                          int max_top_logprobs) {
  if (request.logprobs() < 0 || request.logprobs() > max_top_logprobs) {
    return InvalidArgument("logprobs", absl::StrCat("must be in [0, ", max_top_logprobs, "], got ",
                                                    request.logprobs()));
  }
  if (request.early_exit().has_threshold()) {
    const float threshold = request.early_exit().threshold();
    if (!(threshold > 0.0f && threshold <= 1.0f)) {
      return InvalidArgument("early_exit.threshold",
                             absl::StrCat("must be in (0, 1], got ", threshold));
    }
  }
  absl::StatusOr<std::optional<model::ExitMeasure>> measure =
      ToExitMeasure(request.early_exit().measure());
  if (!measure.ok()) return measure.status();
  absl::StatusOr<std::optional<engine::KnnLmOptions>> knn_lm = ToKnnLmOptions(request.knn_lm());
  if (!knn_lm.ok()) return knn_lm.status();

  engine::GenerateOptions options;
  options.knn_lm = std::move(*knn_lm);
  options.session_id = request.session_id();
  options.prompt = request.prompt();
  options.prompt_token_ids.assign(request.prompt_token_ids().begin(),
                                  request.prompt_token_ids().end());
  options.max_new_tokens = request.max_new_tokens();
  const v1::SamplingParams& sampling = request.sampling();
  options.sampling.temperature = sampling.has_temperature() ? sampling.temperature() : 1.0f;
  options.sampling.top_k = sampling.top_k();
  options.sampling.top_p = sampling.has_top_p() ? sampling.top_p() : 1.0f;
  options.sampling.repetition_penalty =
      sampling.has_repetition_penalty() ? sampling.repetition_penalty() : 1.0f;
  if (sampling.has_seed()) options.sampling.seed = sampling.seed();
  options.sampling.min_p = sampling.min_p();
  options.sampling.presence_penalty = sampling.presence_penalty();
  options.sampling.frequency_penalty = sampling.frequency_penalty();
  for (const auto& entry : sampling.logit_bias()) {
    options.sampling.logit_bias[entry.first] = entry.second;
  }
  options.stop.assign(request.stop().begin(), request.stop().end());
  options.stop_token_ids.assign(request.stop_token_ids().begin(), request.stop_token_ids().end());
  options.top_logprobs = request.logprobs();
  options.stop_at_eos = request.has_stop_at_eos() ? request.stop_at_eos() : true;
  options.early_exit.enabled = request.early_exit().enabled();
  if (request.early_exit().has_threshold()) {
    options.early_exit.threshold = request.early_exit().threshold();
  }
  options.early_exit.measure = *measure;
  options.recall = ToRecall(request.recall());
  return options;
}

engine::RecallRequest ToRecall(const v1::Recall& recall) {
  engine::RecallRequest out;
  if (recall.has_enabled()) out.enabled = recall.enabled();
  if (recall.has_max_lambda()) out.max_lambda = recall.max_lambda();
  if (recall.has_min_match_bytes()) out.min_match_bytes = recall.min_match_bytes();
  return out;
}

absl::StatusOr<engine::ScoreOptions> ToScoreOptions(const v1::ScoreRequest& request) {
  absl::StatusOr<std::optional<engine::KnnLmOptions>> knn_lm = ToKnnLmOptions(request.knn_lm());
  if (!knn_lm.ok()) return knn_lm.status();
  engine::ScoreOptions options;
  options.knn_lm = std::move(*knn_lm);
  options.session_id = request.session_id();
  options.text = request.text();
  options.token_ids.assign(request.token_ids().begin(), request.token_ids().end());
  options.update_memory = request.update_memory();
  options.token_logprobs = request.token_logprobs();
  options.recall = ToRecall(request.recall());
  return options;
}

engine::CreateSessionOptions ToCreateSessionOptions(const v1::CreateSessionRequest& request) {
  engine::CreateSessionOptions options;
  options.session_id = request.session_id();
  options.knn_capacity = request.knn_capacity();
  options.remember = request.remember();
  options.remember_capacity = request.remember_capacity();
  options.ttl = absl::Seconds(request.ttl_seconds());
  options.pinned = request.pinned();
  return options;
}

v1::FinishReason ToProto(engine::FinishReason reason) {
  switch (reason) {
    case engine::FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case engine::FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case engine::FinishReason::kEos:
      return v1::FINISH_REASON_EOS;
    case engine::FinishReason::kCancelled:
      return v1::FINISH_REASON_CANCELLED;
    case engine::FinishReason::kError:
      return v1::FINISH_REASON_ERROR;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

void ToProto(const engine::TokenOutput& token, v1::Token* out) {
  out->set_id(token.id);
  out->set_text(token.text);
  out->set_bytes(token.bytes);
  out->set_logprob(token.logprob);
  out->set_exit_layer(token.exit_layer);
  for (const engine::TokenAlternative& alt : token.top_logprobs) {
    v1::TokenAlternative* proto = out->add_top_logprobs();
    proto->set_id(alt.id);
    proto->set_text(alt.text);
    proto->set_logprob(alt.logprob);
  }
}

void ToProto(const engine::Usage& usage, v1::Usage* out) {
  out->set_prompt_tokens(usage.prompt_tokens);
  out->set_generated_tokens(usage.generated_tokens);
  out->set_session_tokens(usage.session_tokens);
}

void ToProto(const engine::ScoreResult& result, v1::ScoreResponse* out) {
  out->set_token_count(result.token_count);
  out->set_byte_count(result.byte_count);
  out->set_total_logprob(result.total_logprob);
  out->set_bits_per_byte(result.bits_per_byte);
  out->mutable_logprobs()->Add(result.logprobs.begin(), result.logprobs.end());
}

void ToProto(const engine::TokenizeResult& result, v1::TokenizeResponse* out) {
  out->mutable_ids()->Add(result.ids.begin(), result.ids.end());
  for (const std::string& piece : result.pieces) out->add_pieces(piece);
}

void ToProto(const engine::SessionInfo& session, v1::Session* out) {
  out->set_session_id(session.session_id);
  out->set_model(session.model);
  out->set_tokens_seen(session.tokens_seen);
  v1::SessionMemory* memory = out->mutable_memory();
  memory->set_xl_tokens(session.memory.xl_tokens);
  memory->set_compressed_slots(session.memory.compressed_slots);
  memory->set_knn_entries(session.memory.knn_entries);
  memory->set_bytes(session.memory.bytes);
  memory->set_remembered_tokens(session.memory.remembered_tokens);
  out->set_create_time(absl::ToUnixSeconds(session.create_time));
  out->set_last_use_time(absl::ToUnixSeconds(session.last_use_time));
  out->set_busy(session.busy);
  out->set_ttl_seconds(absl::ToInt64Seconds(session.ttl));
  out->set_pinned(session.pinned);
}

void ToProto(const engine::ModelInfo& model, v1::Model* out) {
  out->set_name(model.name);
  out->set_path(model.path);
  out->set_layers(model.layers);
  out->set_d_model(model.d_model);
  out->set_heads(model.heads);
  out->set_vocab_size(model.vocab_size);
  out->set_parameters(model.parameters);
  v1::ModelMemoryConfig* memory = out->mutable_memory();
  memory->set_seg_len(model.seg_len);
  memory->set_mem_len(model.mem_len);
  memory->set_cmem_len(model.cmem_len);
  memory->set_cmem_rate(model.cmem_rate);
  memory->set_compression(model.compression);
  memory->set_clamp_len(model.clamp_len);
  out->set_tokenizer(model.tokenizer);
  out->set_dtype(model.dtype);
  out->set_device(model.device);
  out->set_family(model.family);
  out->set_weight_dtype(model.weight_dtype);
  out->set_window(model.window);
  out->set_sink_tokens(model.sink_tokens);
}

void AppendTokens(const std::vector<engine::TokenOutput>& tokens, const std::string& text,
                  v1::GenerateResponse* out) {
  out->mutable_text()->append(text);
  for (const engine::TokenOutput& token : tokens) ToProto(token, out->add_tokens());
}

absl::StatusOr<PageRequest> ParsePageRequest(int32_t page_size, const std::string& page_token) {
  if (page_size < 0) return InvalidArgument("page_size", "must be >= 0");
  if (page_size > kMaxPageSize) {
    return InvalidArgument("page_size", absl::StrCat("must be at most ", kMaxPageSize));
  }
  PageRequest page;
  page.size = page_size == 0 ? kDefaultPageSize : page_size;
  if (!page_token.empty()) {
    std::string decoded;
    if (!absl::WebSafeBase64Unescape(page_token, &decoded) || decoded.size() < 2 ||
        decoded.compare(0, 2, "k:") != 0) {
      return InvalidArgument("page_token", "not a token from a previous response");
    }
    page.after = decoded.substr(2);
  }
  return page;
}

std::string EncodePageToken(const std::string& last_key) {
  return absl::WebSafeBase64Escape(absl::StrCat("k:", last_key));
}

absl::Status FillSessionsPage(const std::vector<engine::SessionInfo>& sessions,
                              const v1::ListSessionsRequest& request,
                              v1::ListSessionsResponse* out) {
  auto page =
      SelectPage(sessions, request.page_size(), request.page_token(),
                 [](const engine::SessionInfo& s) -> const std::string& { return s.session_id; });
  if (!page.ok()) return page.status();
  for (const engine::SessionInfo* session : page->first) ToProto(*session, out->add_sessions());
  out->set_next_page_token(page->second);
  return absl::OkStatus();
}

absl::Status FillModelsPage(const std::vector<engine::ModelInfo>& models,
                            const v1::ListModelsRequest& request, v1::ListModelsResponse* out) {
  auto page = SelectPage(models, request.page_size(), request.page_token(),
                         [](const engine::ModelInfo& m) -> const std::string& { return m.name; });
  if (!page.ok()) return page.status();
  for (const engine::ModelInfo* model : page->first) ToProto(*model, out->add_models());
  out->set_next_page_token(page->second);
  return absl::OkStatus();
}

engine::AddToDatastoreOptions ToAddToDatastoreOptions(
    const v1::AddToSessionDatastoreRequest& request) {
  engine::AddToDatastoreOptions options;
  options.session_id = request.session_id();
  options.text = request.text();
  return options;
}

void ToProto(const engine::DatastoreInfo& info, v1::Datastore* out) {
  out->set_name(info.name);
  if (info.session_private) out->set_session_id(info.session_id);
  out->set_dir(info.dir);
  out->set_model(info.model);
  out->set_key_type(info.key_type);
  out->set_dimension(info.d);
  out->set_entries(info.entries);
  out->set_bytes(info.bytes);
  out->set_index_type(info.index_type);
  out->set_nlist(info.nlist);
  out->set_pq_m(info.pq_m);
  out->set_pq_nbits(info.pq_nbits);
  out->set_corpus(info.corpus);
  out->set_corpus_files(info.corpus_files);
  out->set_corpus_bytes(info.corpus_bytes);
  out->set_build_seconds(info.build_seconds);
  out->set_built_at(info.built_at);
  out->set_default_lambda(info.default_lambda);
  out->set_default_k(info.default_k);
  out->set_default_temperature(info.default_temperature);
}

absl::Status FillDatastoresPage(const std::vector<engine::DatastoreInfo>& datastores,
                                const v1::ListDatastoresRequest& request,
                                v1::ListDatastoresResponse* out) {
  auto page =
      SelectPage(datastores, request.page_size(), request.page_token(),
                 [](const engine::DatastoreInfo& d) -> const std::string& { return d.name; });
  if (!page.ok()) return page.status();
  for (const engine::DatastoreInfo* d : page->first) ToProto(*d, out->add_datastores());
  out->set_next_page_token(page->second);
  return absl::OkStatus();
}

}  // namespace mnemo::server
