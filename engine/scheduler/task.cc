#include "engine/scheduler/task.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/util/status_macros.h"

namespace mnemo::scheduler {

bool Task::OnDecoded(DecodeOutput, absl::Time now) {
  Abort(absl::InternalError("a decode result for a task that added no decode row"), now);
  return true;
}

int64_t NextChunkSize(const session::SequenceState& state, int seg_len, int64_t remaining) {
  const int64_t to_boundary = seg_len - state.memory.next_position() % seg_len;
  return std::min(remaining, to_boundary);
}

bool PrimesWithBos(const tokenizer::Tokenizer& tokenizer, bool from_ids) {
  return !from_ids && tokenizer.bos_id() >= 0;
}

absl::StatusOr<RecallPlan> ResolveRecall(const engine::RecallRequest& request,
                                         const session::Session* session,
                                         session::SequenceState& state,
                                         int64_t one_shot_capacity) {
  RecallPlan plan;
  const bool remembers = session != nullptr && session->state.history != nullptr;
  plan.enabled = request.enabled.value_or(remembers);
  plan.options.max_lambda = request.max_lambda.value_or(plan.options.max_lambda);
  if (request.min_match_bytes.has_value()) {
    plan.options.min_match_bytes = *request.min_match_bytes;
    plan.options.full_match_bytes = plan.options.min_match_bytes + 8;
  }
  if (!plan.enabled) return plan;
  if (session != nullptr && !remembers) {
    return absl::FailedPreconditionError(absl::StrCat(
        "recall is on but session '", session->id,
        "' was created without remember: it has no history to recall from (CreateSession "
        "with remember=true)"));
  }
  if (session == nullptr && state.history == nullptr) {
    state.history = std::make_unique<datastore::HistoryIndex>(one_shot_capacity);
  }
  return plan;
}

void Remember(const tokenizer::Tokenizer& tokenizer, session::SequenceState& state,
              absl::Span<const int> tokens, std::vector<datastore::RecallPrediction>* predictions,
              size_t first_predicted) {
  if (state.history == nullptr) return;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (predictions != nullptr && i >= first_predicted) {
      predictions->push_back(state.history->Query());
    }
    const int bytes = tokenizer.IsSpecial(tokens[i])
                          ? 1
                          : static_cast<int>(tokenizer.TokenBytes(tokens[i]).size());
    state.history->Append(tokens[i], bytes);
  }
}

absl::Status PrimeIfNeeded(model::Model& model, session::SequenceState& state) {
  if (state.primed() || model.tokenizer().bos_id() < 0) return absl::OkStatus();
  const int bos[] = {model.tokenizer().bos_id()};  // the family's BOS (docs/design.md §11)
  torch::Tensor key;  // [1, d_model]
  // [1, vocab]
  MNEMO_ASSIGN_OR_RETURN(torch::Tensor out,
                         model.Forward(bos, state.memory, model::Outputs::kLast, &key));
  state.last_logprobs = out[0].contiguous();  // [vocab]
  state.last_knn_lm_key = key[0];             // [d_model]
  Remember(model.tokenizer(), state, bos);
  state.last_exit_layer = model.config().n_layers;
  return absl::OkStatus();
}

absl::StatusOr<torch::Tensor> FeedText(model::Model& model, session::SequenceState& state,
                                       absl::Span<const int> tokens, model::Outputs outputs,
                                       torch::Tensor* knn_lm_keys) {
  torch::Tensor keys;  // [n or 1, d_model]: the kNN-LM key of each output row
  // [n, vocab] (kAll) or [1, vocab] (kLast)
  MNEMO_ASSIGN_OR_RETURN(torch::Tensor out, model.Forward(tokens, state.memory, outputs, &keys));
  out = out.contiguous();
  state.last_logprobs = out[out.size(0) - 1];  // [vocab]
  state.last_knn_lm_key = keys[keys.size(0) - 1];  // [d_model]
  state.last_exit_layer = model.config().n_layers;
  if (knn_lm_keys != nullptr) *knn_lm_keys = keys;
  state.tokens_seen += static_cast<int64_t>(tokens.size());
  return out;
}

absl::StatusOr<torch::Tensor> PrimeAndFeedText(model::Model& model, session::SequenceState& state,
                                               absl::Span<const int> tokens) {
  if (state.primed() || model.tokenizer().bos_id() < 0) {
    return absl::InternalError("PrimeAndFeedText: the sequence is primed or has no BOS");
  }
  std::vector<int> ids;
  ids.reserve(tokens.size() + 1);
  ids.push_back(model.tokenizer().bos_id());
  ids.insert(ids.end(), tokens.begin(), tokens.end());
  MNEMO_ASSIGN_OR_RETURN(torch::Tensor out, FeedText(model, state, ids, model::Outputs::kLast));
  state.tokens_seen -= 1;  // BOS is not text
  Remember(model.tokenizer(), state, absl::MakeConstSpan(ids).subspan(0, 1));  // the caller remembers `tokens`
  return out;
}

absl::Status FeedTokenWithExit(model::Model& model, session::SequenceState& state, int token,
                               float threshold, model::ExitMeasure measure) {
  const int ids[] = {token};
  MNEMO_ASSIGN_OR_RETURN(model::ExitForward out,
                         model.ForwardWithExit(ids, state.memory, threshold, measure));
  // An exited token never reaches the last layer, so there is no kNN-LM key for it; the
  // request's last token is fed at full depth (see GenerateTask), which restores one.
  RecordFeed(state, out.logprobs[0].contiguous(), out.exit_layers[0], torch::Tensor());
  return absl::OkStatus();
}

void RecordFeed(session::SequenceState& state, torch::Tensor logprobs, int exit_layer,
                torch::Tensor key) {
  state.last_logprobs = std::move(logprobs);
  state.last_exit_layer = exit_layer;
  state.last_knn_lm_key = std::move(key);
  state.tokens_seen += 1;
}

absl::Span<const float> AsSpan(const torch::Tensor& logprobs) {
  return absl::Span<const float>(logprobs.data_ptr<float>(), logprobs.numel());
}

}  // namespace mnemo::scheduler
