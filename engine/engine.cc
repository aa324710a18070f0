#include "engine/engine.h"

#include <ATen/Parallel.h>
#include <torch/types.h>

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/datastore/model_id.h"
#include "engine/model/family.h"
#include "engine/model/model.h"
#include "engine/scheduler/datastore_info.h"
#include "engine/scheduler/scheduler.h"
#include "engine/scheduler/thread_plan.h"
#include "engine/tokenizer/decode_stream.h"
#include "engine/tokenizer/utf8.h"
#include "engine/util/status_macros.h"

namespace mnemo::engine {
namespace {

absl::StatusOr<torch::Device> ParseDevice(const std::string& name) {
  try {
    return torch::Device(name);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("device '", name, "' is not a device name (cpu, cuda, cuda:N)"));
  }
}

ModelInfo MakeModelInfo(const model::Model& model, const std::string& path) {
  const model::ModelConfig& c = model.config();
  ModelInfo info;
  info.name = c.name;
  info.path = path;
  info.family = std::string(model.family().architecture());
  info.layers = c.n_layers;
  info.d_model = c.d_model;
  info.heads = c.n_heads;
  info.vocab_size = c.vocab_size;
  info.parameters = model.ParameterCount();
  info.seg_len = c.seg_len;
  info.mem_len = c.mem_len;
  info.cmem_len = c.cmem_len;
  info.cmem_rate = c.cmem_rate;
  info.compression = model::CompressionName(c.compression);
  info.clamp_len = c.clamp_len;
  info.tokenizer = std::string(model.tokenizer().name());
  // The checkpoint's own dtype (config.json dtype / torch_dtype); mnemo's own models are
  // written in float32.
  info.dtype = c.decoder.architecture.empty() ? "float32" : c.decoder.dtype;
  info.weight_dtype = model::WeightDtypeName(model.weight_dtype());
  info.device = model.device().str();
  // mnemo-xl: the raw positions a query sees behind itself (memory.mem_len). The Hugging Face
  // families: the window, the query included (--window), and the sinks (--sink_tokens).
  info.window = c.decoder.architecture.empty() ? c.mem_len : c.mem_len + 1;
  info.sink_tokens = c.decoder.sink_tokens;
  return info;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineConfig& config) {
  if (config.threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat("threads must be >= 0, got ", config.threads));
  }
  if (config.prefill_threads < -1 || config.decode_threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefill_threads must be >= -1 and decode_threads >= 0, got ",
                     config.prefill_threads, " and ", config.decode_threads));
  }
  if (config.max_sessions <= 0 || config.max_waiting <= 0 || config.max_running <= 0 ||
      config.max_prefill_tokens < 0 || config.max_new_tokens_cap <= 0 ||
      config.default_max_new_tokens <= 0 ||
      config.default_max_new_tokens > config.max_new_tokens_cap || config.max_top_logprobs < 0) {
    return absl::InvalidArgumentError(
        "engine limits must be positive, with default_max_new_tokens <= max_new_tokens_cap");
  }
  if (config.remember_capacity <= 0 || config.remember_capacity > config.max_remember_capacity) {
    return absl::InvalidArgumentError(absl::StrCat(
        "recall sizes must satisfy 0 < remember_capacity (", config.remember_capacity,
        ") <= max_remember_capacity (", config.max_remember_capacity, ")"));
  }
  if (config.knn_capacity <= 0 || config.knn_capacity > config.max_knn_capacity ||
      config.max_knn_capacity > (int64_t{1} << 30) || config.knn_exact_threshold <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kNN sizes must satisfy 0 < knn_capacity (", config.knn_capacity,
        ") <= max_knn_capacity (", config.max_knn_capacity, ") <= 2^30 and knn_exact_threshold (",
        config.knn_exact_threshold, ") > 0"));
  }
  MNEMO_ASSIGN_OR_RETURN(const bool half_rings, model::ParseKvDtype(config.kv_dtype));
  MNEMO_ASSIGN_OR_RETURN(const torch::ScalarType weight_dtype,
                         model::ParseWeightDtype(config.weight_dtype));
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  at::set_num_threads(config.threads > 0 ? config.threads : std::max(cores, 1));

  MNEMO_ASSIGN_OR_RETURN(torch::Device device, ParseDevice(config.device));
  if (half_rings && !device.is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_dtype float16 is for the CPU; device is ", device.str()));
  }
  model::LoadOptions load;
  load.device = device;
  load.weight_dtype = weight_dtype;
  load.window = config.window;
  load.sink_tokens = config.sink_tokens;
  MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<model::Model> model,
                         model::Model::Load(config.model_dir, load));
  ModelInfo info = MakeModelInfo(*model, config.model_dir);
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer = model->shared_tokenizer();

  // Datastores are checked against the weights on disk (not the config's name alone).
  MNEMO_ASSIGN_OR_RETURN(datastore::ModelId model_id, datastore::ComputeModelId(config.model_dir));
  std::vector<datastore::DatastoreSpec> specs;
  for (const std::string& flag : config.datastores) {
    MNEMO_ASSIGN_OR_RETURN(datastore::DatastoreSpec spec, datastore::ParseDatastoreSpec(flag));
    specs.push_back(std::move(spec));
  }
  MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<datastore::DatastoreCatalog> catalog,
                         datastore::DatastoreCatalog::Open(specs, model_id));
  std::shared_ptr<const datastore::DatastoreCatalog> datastores = std::move(catalog);

  scheduler::SchedulerConfig sc;
  if (!config.session_dir.empty()) {
    if (config.session_log_compact_bytes <= 0) {
      return absl::InvalidArgumentError("session_log_compact_bytes must be > 0");
    }
    session::JournalObserver observer{config.session_snapshot_observer,
                                      config.session_restore_observer,
                                      config.session_log_observer};
    MNEMO_ASSIGN_OR_RETURN(
        sc.sessions.journal,
        session::SessionJournal::Open(
            {config.session_dir, model_id.ToString(), config.session_log_compact_bytes},
            std::move(observer)));
  }
  sc.limits.default_max_new_tokens = config.default_max_new_tokens;
  sc.limits.max_new_tokens_cap = config.max_new_tokens_cap;
  sc.limits.max_top_logprobs = config.max_top_logprobs;
  sc.max_waiting = config.max_waiting;
  sc.max_running = config.max_running;
  sc.batch_decode = config.batch_decode;
  EngineConfig resolved = config;  // config() reports the thread counts chosen
  const int64_t bytes_per_weight = weight_dtype == torch::kFloat32 ? 4 : 2;
  const scheduler::ThreadPlan threads = scheduler::ResolveThreadPlan(
      model->ParameterCount() * bytes_per_weight, cores, config.decode_threads,
      config.prefill_threads);
  resolved.decode_threads = threads.decode_threads;
  resolved.prefill_threads = threads.prefill_threads;
  sc.decode_threads = threads.decode_threads;
  sc.max_prefill_tokens = config.max_prefill_tokens;
  sc.prefill_threads = threads.prefill_threads;
  sc.decode_batch_observer = config.decode_batch_observer;
  sc.sessions.max_sessions = config.max_sessions;
  sc.sessions.ttl = config.session_ttl;
  sc.sessions.max_ttl = config.max_session_ttl;
  sc.sessions.hibernate_after = config.session_hibernate_after;
  sc.sessions.max_memory_bytes = config.max_memory_bytes;
  sc.sessions.max_knn_capacity = config.max_knn_capacity;
  sc.sessions.max_remember_capacity = config.max_remember_capacity;
  sc.remember_capacity = config.remember_capacity;
  sc.knn.default_capacity = config.knn_capacity;
  sc.knn.exact_threshold = config.knn_exact_threshold;
  sc.half_rings = half_rings;
  sc.model_name = info.name;
  sc.datastores = datastores;
  sc.model_id = model_id.ToString();
  sc.max_session_datastore_entries = config.max_session_datastore_entries;
  if (config.knn_search_observer) {
    sc.knn_search_observer = [observer = config.knn_search_observer](absl::Duration latency,
                                                                     int64_t) {
      observer(latency);
    };
  }
  auto scheduler = std::make_unique<scheduler::Scheduler>(std::move(sc), std::move(model));
  return std::unique_ptr<Engine>(
      new Engine(std::move(resolved), std::move(info), std::move(tokenizer), std::move(datastores),
                 std::move(scheduler)));
}

Engine::Engine(EngineConfig config, ModelInfo info,
               std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
               std::shared_ptr<const datastore::DatastoreCatalog> datastores,
               std::unique_ptr<scheduler::Scheduler> scheduler)
    : config_(std::move(config)),
      model_info_(std::move(info)),
      tokenizer_(std::move(tokenizer)),
      datastores_(std::move(datastores)),
      scheduler_(std::move(scheduler)) {}

Engine::~Engine() = default;  // the scheduler stops its loop and closes every stream

absl::Status Engine::Submit(GenerateOptions options, std::shared_ptr<GenerateStream> stream) {
  return scheduler_->SubmitGenerate(std::move(options), std::move(stream));
}

void Engine::Score(ScoreOptions options, ScoreDone done, CancelCheck cancelled) {
  scheduler_->SubmitScore(std::move(options), std::move(done), std::move(cancelled));
}

void Engine::CreateSession(CreateSessionOptions options, SessionDone done) {
  scheduler_->CreateSession(std::move(options), std::move(done));
}

void Engine::GetSession(std::string session_id, SessionDone done) {
  scheduler_->GetSession(std::move(session_id), std::move(done));
}

void Engine::ListSessions(ListDone done) { scheduler_->ListSessions(std::move(done)); }

void Engine::DeleteSession(std::string session_id, StatusDone done) {
  scheduler_->DeleteSession(std::move(session_id), std::move(done));
}

void Engine::ExportSession(std::string session_id, BytesDone done) {
  scheduler_->ExportSession(std::move(session_id), std::move(done));
}

void Engine::ImportSession(std::string session_id, std::string snapshot, SessionDone done) {
  scheduler_->ImportSession(std::move(session_id), std::move(snapshot), std::move(done));
}

void Engine::ForkSession(std::string session_id, std::string new_session_id, SessionDone done) {
  scheduler_->ForkSession(std::move(session_id), std::move(new_session_id), std::move(done));
}

void Engine::AddToSessionDatastore(AddToDatastoreOptions options, AddToDatastoreDone done,
                                   CancelCheck cancelled) {
  scheduler_->SubmitAddToDatastore(std::move(options), std::move(done), std::move(cancelled));
}

std::vector<DatastoreInfo> Engine::ListDatastores() const {
  std::vector<DatastoreInfo> infos;
  for (const auto& entry : datastores_->entries()) {
    infos.push_back(scheduler::SharedDatastoreInfo(entry));
  }
  return infos;
}

void Engine::GetDatastore(std::string name, std::string session_id, DatastoreDone done) {
  if (name == datastore::kSessionDatastoreName) {
    if (session_id.empty()) {
      done(absl::InvalidArgumentError(absl::StrCat(
          "datastore \"", name, "\" is a session's private datastore: set session_id")));
      return;
    }
    scheduler_->GetSessionDatastore(std::move(session_id), std::move(done));
    return;
  }
  const datastore::DatastoreCatalog::Entry* entry = datastores_->Find(name);
  if (entry == nullptr) {
    done(absl::NotFoundError(absl::StrCat("datastore \"", name, "\" is not loaded (loaded: ",
                                          datastores_->Names(), ")")));
    return;
  }
  done(scheduler::SharedDatastoreInfo(*entry));
}

absl::StatusOr<TokenizeResult> Engine::Tokenize(const std::string& text,
                                                bool add_special_tokens) const {
  if (!tokenizer::IsValidUtf8(text)) {
    return absl::InvalidArgumentError("text is not valid UTF-8");
  }
  TokenizeResult result;
  // With special tokens: as the tokenizer adds them (its BOS when it has one, the same rule
  // as a text prompt on a fresh sequence, scheduler::PrimesWithBos).
  result.ids = add_special_tokens ? tokenizer_->EncodeWithSpecials(text) : tokenizer_->Encode(text);
  // Each piece is the text its token completes ("" for the leading bytes of a multi-byte
  // character, and for specials), so the pieces are valid UTF-8 and concatenate to the text
  // (the SentencePiece space a text's first token carries is dropped: DecodeStream).
  tokenizer::DecodeStream decoder(*tokenizer_, /*starts_text=*/true);
  for (int id : result.ids) result.pieces.push_back(decoder.Feed(id));
  return result;
}

absl::StatusOr<std::string> Engine::Detokenize(absl::Span<const int> ids,
                                               bool skip_special_tokens) const {
  const int vocab_size = model_info_.vocab_size;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ids[", i, "] = ", ids[i], " is outside the vocabulary [0, ", vocab_size, ")"));
    }
  }
  const tokenizer::SpecialIds special = tokenizer_->special_ids();
  // As the tokenizer's Decode (the ids start a text), valid UTF-8.
  tokenizer::DecodeStream decoder(*tokenizer_, /*starts_text=*/true);
  std::string text;
  for (int id : ids) {
    if (!tokenizer_->IsSpecial(id)) {
      text += decoder.Feed(id);
      continue;
    }
    if (skip_special_tokens) continue;
    // TODO(issue 21): the tokenizer's own text for its specials ("<s>", "<|im_end|>") once the
    // Tokenizer interface offers it; markers until then.
    text += decoder.Flush();
    if (id == special.bos) {
      text += "<|bos|>";
    } else if (id == special.eos) {
      text += "<|eos|>";
    } else if (id == special.pad) {
      text += "<|pad|>";
    } else {
      absl::StrAppend(&text, "<|special:", id, "|>");
    }
  }
  text += decoder.Flush();
  return text;
}

EngineStats Engine::Stats() const { return scheduler_->Stats(); }

}  // namespace mnemo::engine
