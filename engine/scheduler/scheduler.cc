#include "engine/scheduler/scheduler.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "engine/scheduler/datastore_add_task.h"
#include "engine/scheduler/datastore_info.h"
#include "engine/scheduler/generate_task.h"
#include "engine/scheduler/iteration_plan.h"
#include "engine/scheduler/score_task.h"
#include "engine/util/status_macros.h"

namespace mnemo::scheduler {
namespace {

model::MemoryOptions MakeMemoryOptions(const KnnLimits& knn, bool half_rings,
                                       const model::ModelConfig& model) {
  model::MemoryOptions options;
  options.half_rings = half_rings;
  options.knn_mem_len = static_cast<int>(knn.default_capacity > 0 ? knn.default_capacity
                                                                   : model.knn_mem_len);
  options.knn_exact_threshold = knn.exact_threshold;
  return options;
}

// Requests' token ids are checked against the served model's vocabulary, whatever the config
// says.
SchedulerConfig WithModelVocab(SchedulerConfig config, const model::Model& model) {
  config.limits.vocab_size = model.config().vocab_size;
  return config;
}

}  // namespace

Scheduler::Scheduler(SchedulerConfig config, std::unique_ptr<model::Model> model)
    : config_(WithModelVocab(std::move(config), *model)),
      inbox_(config_.max_waiting, config_.max_running),
      model_(std::move(model)),
      workers_(config_.decode_threads - 1),
      decoder_(*model_,
               model::ParallelDecoderOptions{{}, config_.decode_threads,
                                             config_.decode_min_shard_rows},
               workers_),
      memory_options_(MakeMemoryOptions(config_.knn, config_.half_rings, model_->config())),
      executor_(*model_, decoder_, memory_options_, config_.knn_search_observer, config_.clock,
                {config_.batch_decode, config_.prefill_threads, &memory_pool_}),
      sessions_(config_.sessions,
                [this](int64_t knn_capacity) { return NewSessionMemory(knn_capacity); },
                config_.clock),
      last_sweep_(config_.clock()),
      seed_rng_(std::random_device()()),
      thread_([this] { Loop(); }) {}

Scheduler::~Scheduler() { Shutdown(); }

memory::SessionMemory Scheduler::NewSessionMemory(int64_t knn_capacity) const {
  model::MemoryOptions options = memory_options_;
  if (knn_capacity > 0) options.knn_mem_len = static_cast<int>(knn_capacity);
  return model_->NewMemory(options);
}

void Scheduler::Shutdown() {
  inbox_.Close();
  if (thread_.joinable()) thread_.join();
}

absl::Status Scheduler::Prepare(GenerateCall& call) {
  if (call.stream == nullptr) return absl::InvalidArgumentError("Submit needs a stream");
  MNEMO_RETURN_IF_ERROR(
      ValidateGenerate(call.options, config_.limits, ModelExitInfo::Of(*model_)));
  if (call.options.knn_lm) {
    MNEMO_ASSIGN_OR_RETURN(call.knn_lm, ResolveKnnLm(*call.options.knn_lm,
                                                     call.options.session_id,
                                                     *config_.datastores));
  }
  return absl::OkStatus();
}

absl::Status Scheduler::Prepare(ScoreCall& call) {
  MNEMO_RETURN_IF_ERROR(ValidateScore(call.options, config_.limits));
  if (call.options.knn_lm) {
    MNEMO_ASSIGN_OR_RETURN(call.knn_lm, ResolveKnnLm(*call.options.knn_lm,
                                                     call.options.session_id,
                                                     *config_.datastores));
  }
  return absl::OkStatus();
}

absl::Status Scheduler::Prepare(AddToDatastoreCall& call) {
  return ValidateAddToDatastore(call.options);
}

absl::Status Scheduler::Enqueue(Call call) {
  auto request = std::make_unique<Request>(Request{std::move(call), config_.clock()});
  absl::Status status = std::visit(
      Overloaded{[this](GenerateCall& c) { return Prepare(c); },
                 [this](ScoreCall& c) { return Prepare(c); },
                 [this](AddToDatastoreCall& c) { return Prepare(c); },
                 [](auto&) { return absl::OkStatus(); }},  // session operations
      request->call);
  if (status.ok()) status = inbox_.Push(request);  // on OK the loop owns the request
  // A Generate's error goes back to its caller with the stream untouched; callbacks get
  // theirs inline.
  if (!status.ok() && !std::holds_alternative<GenerateCall>(request->call)) {
    request->Fail(status, config_.clock());
  }
  return status;
}

absl::Status Scheduler::SubmitGenerate(engine::GenerateOptions options,
                                       std::shared_ptr<engine::GenerateStream> stream) {
  return Enqueue(GenerateCall{std::move(options), std::move(stream), std::nullopt});
}

void Scheduler::SubmitScore(engine::ScoreOptions options, ScoreDone done,
                            CancelCheck cancelled) {
  Enqueue(ScoreCall{std::move(options), std::move(done), std::nullopt, std::move(cancelled)})
      .IgnoreError();
}

void Scheduler::SubmitAddToDatastore(engine::AddToDatastoreOptions options,
                                     AddToDatastoreDone done, CancelCheck cancelled) {
  Enqueue(AddToDatastoreCall{std::move(options), std::move(done), std::move(cancelled)})
      .IgnoreError();
}

void Scheduler::GetSessionDatastore(std::string session_id, DatastoreDone done) {
  Enqueue(GetSessionDatastoreCall{std::move(session_id), std::move(done)}).IgnoreError();
}

void Scheduler::CreateSession(engine::CreateSessionOptions options, SessionDone done) {
  Enqueue(CreateSessionCall{std::move(options), std::move(done)}).IgnoreError();
}

void Scheduler::GetSession(std::string session_id, SessionDone done) {
  Enqueue(GetSessionCall{std::move(session_id), std::move(done)}).IgnoreError();
}

void Scheduler::ListSessions(ListDone done) {
  Enqueue(ListSessionsCall{std::move(done)}).IgnoreError();
}

void Scheduler::DeleteSession(std::string session_id, StatusDone done) {
  Enqueue(DeleteSessionCall{std::move(session_id), std::move(done)}).IgnoreError();
}

void Scheduler::ExportSession(std::string session_id, BytesDone done) {
  Enqueue(ExportSessionCall{std::move(session_id), std::move(done)}).IgnoreError();
}

void Scheduler::ImportSession(std::string session_id, std::string snapshot, SessionDone done) {
  Enqueue(ImportSessionCall{std::move(session_id), std::move(snapshot), std::move(done)})
      .IgnoreError();
}

void Scheduler::ForkSession(std::string session_id, std::string new_session_id,
                            SessionDone done) {
  Enqueue(ForkSessionCall{std::move(session_id), std::move(new_session_id), std::move(done)})
      .IgnoreError();
}

engine::EngineStats Scheduler::Stats() const {
  engine::EngineStats stats;
  stats.running = running_count_.load(std::memory_order_relaxed);
  stats.waiting = inbox_.waiting();
  stats.sessions = session_count_.load(std::memory_order_relaxed);
  stats.session_memory_bytes = session_bytes_.load(std::memory_order_relaxed);
  stats.sessions_evicted_total = evicted_total_.load(std::memory_order_relaxed);
  if (const session::SessionJournal* journal = config_.sessions.journal.get()) {
    stats.sessions_on_disk = journal->sessions_on_disk();
  }
  stats.session_datastore_entries = session_datastore_entries_.load(std::memory_order_relaxed);
  stats.session_datastore_bytes = session_datastore_bytes_.load(std::memory_order_relaxed);
  return stats;
}

void Scheduler::Loop() {
  while (true) {
    // Sleep only when there is nothing to run; wake for new requests, Close, or the sweep.
    const absl::Duration wait = running_.empty() && ready_.empty() ? config_.sweep_interval
                                                                   : absl::ZeroDuration();
    std::vector<std::unique_ptr<Request>> incoming = inbox_.PopAll(wait);
    const bool closing = inbox_.closed();
    absl::Time now = config_.clock();
    for (auto& request : incoming) {
      if (closing) {
        request->Fail(absl::UnavailableError("the engine is shutting down"), now);
      } else {
        Admit(std::move(request), now);
      }
    }
    if (closing) break;
    ReapCancelledWaiting(now);
    StartReady();
    RunIteration();
    now = config_.clock();
    if (now - last_sweep_ >= config_.sweep_interval) {
      sessions_.Sweep(now);
      CountSessionDatastores();
      last_sweep_ = now;
    }
    PublishStats();
  }

  // Shutdown: everything outstanding ends with UNAVAILABLE, including requests pushed after
  // the last PopAll but before Close (none can arrive after it).
  const absl::Status unavailable = absl::UnavailableError("the engine is shutting down");
  const absl::Time now = config_.clock();
  for (auto& request : inbox_.PopAll(absl::ZeroDuration())) request->Fail(unavailable, now);
  for (auto& task : running_) task->Abort(unavailable, now);
  for (auto& task : ready_) task->Abort(unavailable, now);
  for (auto& task : session_queue_.TakeAll()) task->Abort(unavailable, now);
  running_.clear();
  ready_.clear();
  inbox_.SetParked(0);
  PublishStats();
}

void Scheduler::Admit(std::unique_ptr<Request> request, absl::Time now) {
  std::visit(Overloaded{[&](GenerateCall& c) { AdmitTask(*request, c.options.session_id, now); },
                        [&](ScoreCall& c) { AdmitTask(*request, c.options.session_id, now); },
                        [&](AddToDatastoreCall& c) {
                          AdmitTask(*request, c.options.session_id, now);
                        },
                        [&](auto& session_op) {
                          Answer(session_op);
                          PublishStats();
                        }},
             request->call);
}

void Scheduler::AdmitTask(Request& request, const std::string& session_id, absl::Time now) {
  session::Session* session = nullptr;
  if (!session_id.empty()) {
    absl::StatusOr<session::Session*> found = sessions_.Find(session_id);
    if (!found.ok()) {
      request.Fail(found.status(), now);
      return;
    }
    session = *found;
  }
  std::unique_ptr<Task> task = MakeTask(request, next_task_id_++, session);
  if (session != nullptr && sessions_.journal() != nullptr) {
    task->set_commit([this](const session::Session& s, session::CallKind kind, int64_t tokens,
                            Task::Deliver deliver) {
      sessions_.Commit(s, kind, tokens, std::move(deliver));
    });
  }
  if (std::unique_ptr<Task> runnable = session_queue_.Acquire(std::move(task))) {
    if (session != nullptr) sessions_.Touch(*session);
    ready_.push_back(std::move(runnable));
  }
}

std::unique_ptr<Task> Scheduler::MakeTask(Request& request, uint64_t id,
                                          session::Session* session) {
  return std::visit(
      Overloaded{
          [&](GenerateCall& c) -> std::unique_ptr<Task> {
            const uint64_t seed = c.options.sampling.seed.value_or(seed_rng_());
            return std::make_unique<GenerateTask>(id, std::move(c.options), std::move(c.knn_lm),
                                                  std::move(c.stream), request.submit_time,
                                                  seed, session, model_->tokenizer(),
                                                  config_.remember_capacity);
          },
          [&](ScoreCall& c) -> std::unique_ptr<Task> {
            return std::make_unique<ScoreTask>(id, std::move(c.options), std::move(c.knn_lm),
                                               std::move(c.done), session, model_->tokenizer(),
                                               config_.remember_capacity,
                                               std::move(c.cancelled));
          },
          [&](AddToDatastoreCall& c) -> std::unique_ptr<Task> {
            return std::make_unique<DatastoreAddTask>(
                id, std::move(c.options), config_.max_session_datastore_entries,
                config_.model_id, std::move(c.done), session, model_->tokenizer(),
                std::move(c.cancelled));
          },
          [](auto&) -> std::unique_ptr<Task> { return nullptr; }},  // session operations
      request.call);
}

void Scheduler::Answer(CreateSessionCall& call) {
  // Checked even without remember, where it is otherwise unused: a bad value is a mistake.
  if (absl::Status s = sessions_.CheckRememberCapacity(call.options.remember_capacity); !s.ok()) {
    return call.done(s);
  }
  absl::StatusOr<session::Session*> created =
      sessions_.Create(call.options.session_id, call.options.knn_capacity,
                       !call.options.remember                 ? 0
                       : call.options.remember_capacity == 0 ? config_.remember_capacity
                                                              : call.options.remember_capacity,
                       call.options.ttl, call.options.pinned);
  if (!created.ok()) {
    call.done(created.status());
  } else {
    call.done(Info(**created));
  }
}

void Scheduler::Answer(GetSessionCall& call) {
  absl::StatusOr<session::Session*> found = sessions_.Find(call.session_id);
  if (!found.ok()) {
    call.done(found.status());
  } else {
    call.done(Info(**found));
  }
}

void Scheduler::Answer(ListSessionsCall& call) {
  std::vector<engine::SessionInfo> infos;
  for (const session::Session* s : sessions_.List()) infos.push_back(Info(*s));
  call.done(std::move(infos));
}

namespace {

absl::Status BusyError(const session::Session& session, absl::string_view what) {
  return absl::FailedPreconditionError(absl::StrCat(
      "session '", session.id, "' is busy with a request; ", what, " it when it finishes"));
}

}  // namespace

void Scheduler::Answer(ExportSessionCall& call) {
  absl::StatusOr<session::Session*> found = sessions_.Find(call.session_id);
  if (!found.ok()) return call.done(found.status());
  if ((*found)->busy) return call.done(BusyError(**found, "export"));
  call.done(session::EncodeSnapshot(**found, config_.model_id, /*generation=*/0));
}

void Scheduler::Answer(ImportSessionCall& call) {
  // Sizes first: they decide what decoding allocates.
  absl::StatusOr<session::SnapshotMeta> meta = session::DecodeSnapshotMeta(call.snapshot);
  if (meta.ok()) {
    const int64_t knn_limit =
        std::max<int64_t>(config_.sessions.max_knn_capacity, memory_options_.knn_mem_len);
    if (meta->knn_len > knn_limit ||
        meta->remember_capacity > config_.sessions.max_remember_capacity) {
      return call.done(absl::FailedPreconditionError(absl::StrCat(
          "the imported session has a kNN memory of ", meta->knn_len,
          " entries and a recall history of ", meta->remember_capacity,
          " tokens; this server allows at most ", knn_limit, " and ",
          config_.sessions.max_remember_capacity,
          " (--max_knn_capacity, --max_remember_capacity)")));
    }
  }
  absl::StatusOr<std::unique_ptr<session::Session>> decoded = session::DecodeSnapshot(
      call.snapshot, config_.model_id, [this](int64_t knn_len) { return NewSessionMemory(knn_len); });
  if (!decoded.ok()) {
    return call.done(absl::Status(decoded.status().code(),
                                  absl::StrCat("the imported snapshot: ", decoded.status().message())));
  }
  if (!call.session_id.empty()) (*decoded)->id = call.session_id;
  absl::StatusOr<session::Session*> adopted = sessions_.Adopt(std::move(*decoded));
  if (!adopted.ok()) return call.done(adopted.status());
  call.done(Info(**adopted));
}

void Scheduler::Answer(ForkSessionCall& call) {
  absl::StatusOr<session::Session*> found = sessions_.Find(call.session_id);
  if (!found.ok()) return call.done(found.status());
  const session::Session& source = **found;
  if (source.busy) return call.done(BusyError(source, "fork"));
  auto fork = std::make_unique<session::Session>();
  fork->id = call.new_session_id.empty() ? sessions_.NewId() : call.new_session_id;
  fork->state = source.state.Clone();
  if (source.datastore != nullptr) fork->datastore = source.datastore->Clone();
  fork->create_time = sessions_.Now();
  absl::StatusOr<session::Session*> adopted = sessions_.Adopt(std::move(fork));
  if (!adopted.ok()) return call.done(adopted.status());
  call.done(Info(**adopted));
}

void Scheduler::Answer(DeleteSessionCall& call) {
  call.done(sessions_.Delete(call.session_id));
  CountSessionDatastores();
}

void Scheduler::Answer(GetSessionDatastoreCall& call) {
  absl::StatusOr<session::Session*> found = sessions_.Find(call.session_id);
  if (!found.ok()) {
    call.done(found.status());
  } else {
    call.done(SessionDatastoreInfo(**found, config_.model_id));
  }
}

void Scheduler::StartReady() {
  const int start = TasksToStart(static_cast<int>(running_.size()),
                                 static_cast<int>(ready_.size()), config_.max_running);
  for (int i = 0; i < start; ++i) {
    running_.push_back(std::move(ready_.front()));
    ready_.pop_front();
  }
}

void Scheduler::RunIteration() {
  std::vector<TaskList::iterator> its;
  std::vector<Task*> tasks;
  std::vector<TaskView> views;
  its.reserve(running_.size());
  tasks.reserve(running_.size());
  views.reserve(running_.size());
  for (auto it = running_.begin(); it != running_.end(); ++it) {
    Task& task = **it;
    its.push_back(it);
    tasks.push_back(&task);
    views.push_back({task.id(), task.WantsPrefill(), task.PrefillsAnywhere(), task.cancelled()});
  }
  const IterationPlan plan = PlanIteration(
      views, {config_.max_prefill_tokens, model_->config().seg_len, config_.max_running});
  const IterationOutcome outcome = executor_.Run(plan, tasks);
  if (outcome.decode_rows > 0 && config_.decode_batch_observer) {
    config_.decode_batch_observer(outcome.decode_rows);
  }
  for (size_t i : outcome.finished) {
    Release(*tasks[i]);
    // A one-shot request's memory goes back to the pool, emptied, for the next request (no
    // ~7.7 MB allocation and zero-fill per request).
    memory_pool_.Give(tasks[i]->TakeOneShotMemory());
    running_.erase(its[i]);
  }
  // Prefills that did not fit go first next time (in their order), so none waits forever.
  for (auto d = plan.deferred.rbegin(); d != plan.deferred.rend(); ++d) {
    running_.splice(running_.begin(), running_, its[*d]);
  }
}

void Scheduler::ReapCancelledWaiting(absl::Time now) {
  StepContext ctx{*model_, now, memory_options_, config_.knn_search_observer, nullptr,
                  &memory_pool_};
  // Taken out of ready_ first: releasing a session may append its next task to ready_.
  std::vector<std::unique_ptr<Task>> holding;  // cancelled tasks that hold their session
  for (auto it = ready_.begin(); it != ready_.end();) {
    if ((*it)->cancelled()) {
      holding.push_back(std::move(*it));
      it = ready_.erase(it);
    } else {
      ++it;
    }
  }
  for (std::unique_ptr<Task>& task : holding) {
    task->Step(ctx);  // a cancelled task finishes without model work
    Release(*task);
  }
  for (std::unique_ptr<Task>& task : session_queue_.ReapCancelled()) {
    task->Step(ctx);  // the same; it never held its session
  }
}

void Scheduler::Release(Task& task) {
  session::Session* session = task.session();
  if (session == nullptr) return;
  sessions_.Touch(*session);
  if (std::unique_ptr<Task> next = session_queue_.Release(*session)) {
    ready_.push_back(std::move(next));  // the session stays busy, held by `next`
    return;
  }
  sessions_.UpdateBytes(*session);  // may evict others (never this one: it was just used)
}

void Scheduler::CountSessionDatastores() {
  int64_t entries = 0, bytes = 0;
  for (const session::Session* s : sessions_.List()) {
    if (s->datastore == nullptr) continue;
    entries += s->datastore->entries();
    bytes += s->datastore->bytes();
  }
  session_datastore_entries_.store(entries, std::memory_order_relaxed);
  session_datastore_bytes_.store(bytes, std::memory_order_relaxed);
}

void Scheduler::PublishStats() {
  const int parked = static_cast<int>(ready_.size()) + session_queue_.size();
  inbox_.SetParked(parked);
  running_count_.store(static_cast<int>(running_.size()), std::memory_order_relaxed);
  session_count_.store(sessions_.size(), std::memory_order_relaxed);
  session_bytes_.store(sessions_.total_bytes(), std::memory_order_relaxed);
  evicted_total_.store(sessions_.evicted_total(), std::memory_order_relaxed);
}

engine::SessionInfo Scheduler::Info(const session::Session& session) const {
  engine::SessionInfo info;
  info.session_id = session.id;
  info.model = config_.model_name;
  info.tokens_seen = session.state.tokens_seen;
  info.memory.xl_tokens = session.state.memory.xl_tokens();
  info.memory.compressed_slots = session.state.memory.compressed_slots();
  info.memory.knn_entries = session.state.memory.knn_entries();
  info.memory.remembered_tokens =
      session.state.history != nullptr ? session.state.history->size() : 0;
  info.memory.bytes = session.bytes;
  info.create_time = session.create_time;
  info.last_use_time = session.last_use_time;
  info.busy = session.busy;
  info.ttl = session.ttl;
  info.pinned = session.pinned;
  return info;
}

}  // namespace mnemo::scheduler
