#include "engine/scheduler/scheduler.h"

#include <exception>
#include <list>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "engine/scheduler/datastore_add_task.h"
#include "engine/scheduler/datastore_info.h"
#include "engine/scheduler/generate_task.h"
#include "engine/scheduler/score_task.h"
#include "engine/util/omp_threads.h"

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

}  // namespace

Scheduler::Scheduler(SchedulerConfig config, std::unique_ptr<model::Model> model)
    : config_(std::move(config)),
      inbox_(config_.max_waiting, config_.max_running),
      model_(std::move(model)),
      decoder_(*model_, model::ParallelDecoderOptions{{}, config_.decode_threads,
                                                       config_.decode_min_shard_rows}),
      memory_options_(MakeMemoryOptions(config_.knn, config_.half_rings, model_->config())),
      sessions_(config_.sessions,
                [this](int64_t knn_capacity) {
                  model::MemoryOptions options = memory_options_;
                  if (knn_capacity > 0) options.knn_mem_len = static_cast<int>(knn_capacity);
                  return model_->NewMemory(options);
                },
                config_.clock),
      last_sweep_(config_.clock()),
      seed_rng_(std::random_device()()),
      thread_([this] { Loop(); }) {}

Scheduler::~Scheduler() { Shutdown(); }

void Scheduler::Shutdown() {
  inbox_.Close();
  if (thread_.joinable()) thread_.join();
}

absl::Status Scheduler::Enqueue(std::unique_ptr<Request> request) {
  absl::Status status = inbox_.Push(request);
  if (!status.ok() && request->kind != Request::Kind::kGenerate) {
    request->Fail(status, config_.clock());  // callbacks get the error inline
  }
  return status;
}

absl::Status Scheduler::SubmitGenerate(engine::GenerateOptions options,
                                       std::shared_ptr<engine::GenerateStream> stream) {
  if (stream == nullptr) return absl::InvalidArgumentError("Submit needs a stream");
  if (absl::Status s = ValidateGenerate(options, config_.limits, ModelExitInfo::Of(*model_));
      !s.ok())
    return s;
  std::optional<KnnLmPlan> knn_lm;
  if (options.knn_lm) {
    absl::StatusOr<KnnLmPlan> plan =
        ResolveKnnLm(*options.knn_lm, options.session_id, *config_.datastores);
    if (!plan.ok()) return plan.status();
    knn_lm = std::move(*plan);
  }
  auto request = std::make_unique<Request>();
  request->knn_lm = std::move(knn_lm);
  request->kind = Request::Kind::kGenerate;
  request->submit_time = config_.clock();
  request->generate = std::move(options);
  request->stream = std::move(stream);
  return Enqueue(std::move(request));
}

void Scheduler::SubmitScore(engine::ScoreOptions options, ScoreDone done) {
  if (absl::Status s = ValidateScore(options); !s.ok()) {
    done(s);
    return;
  }
  std::optional<KnnLmPlan> knn_lm;
  if (options.knn_lm) {
    absl::StatusOr<KnnLmPlan> plan =
        ResolveKnnLm(*options.knn_lm, options.session_id, *config_.datastores);
    if (!plan.ok()) {
      done(plan.status());
      return;
    }
    knn_lm = std::move(*plan);
  }
  auto request = std::make_unique<Request>();
  request->knn_lm = std::move(knn_lm);
  request->kind = Request::Kind::kScore;
  request->submit_time = config_.clock();
  request->score = std::move(options);
  request->score_done = std::move(done);
  Enqueue(std::move(request)).IgnoreError();
}

void Scheduler::SubmitAddToDatastore(engine::AddToDatastoreOptions options,
                                     AddToDatastoreDone done) {
  if (absl::Status s = ValidateAddToDatastore(options); !s.ok()) {
    done(s);
    return;
  }
  auto request = std::make_unique<Request>();
  request->kind = Request::Kind::kAddToDatastore;
  request->submit_time = config_.clock();
  request->add = std::move(options);
  request->add_done = std::move(done);
  Enqueue(std::move(request)).IgnoreError();
}

void Scheduler::GetSessionDatastore(std::string session_id, DatastoreDone done) {
  auto request = std::make_unique<Request>();
  request->kind = Request::Kind::kGetSessionDatastore;
  request->session_id = std::move(session_id);
  request->datastore_done = std::move(done);
  Enqueue(std::move(request)).IgnoreError();
}

void Scheduler::CreateSession(engine::CreateSessionOptions options, SessionDone done) {
  auto request = std::make_unique<Request>();
  request->kind = Request::Kind::kCreateSession;
  request->session_id = std::move(options.session_id);
  request->knn_capacity = options.knn_capacity;
  request->session_done = std::move(done);
  Enqueue(std::move(request)).IgnoreError();
}

void Scheduler::GetSession(std::string session_id, SessionDone done) {
  auto request = std::make_unique<Request>();
  request->kind = Request::Kind::kGetSession;
  request->session_id = std::move(session_id);
  request->session_done = std::move(done);
  Enqueue(std::move(request)).IgnoreError();
}

void Scheduler::ListSessions(ListDone done) {
  auto request = std::make_unique<Request>();
  request->kind = Request::Kind::kListSessions;
  request->list_done = std::move(done);
  Enqueue(std::move(request)).IgnoreError();
}

void Scheduler::DeleteSession(std::string session_id, StatusDone done) {
  auto request = std::make_unique<Request>();
  request->kind = Request::Kind::kDeleteSession;
  request->session_id = std::move(session_id);
  request->status_done = std::move(done);
  Enqueue(std::move(request)).IgnoreError();
}

engine::EngineStats Scheduler::Stats() const {
  engine::EngineStats stats;
  stats.running = running_count_.load(std::memory_order_relaxed);
  stats.waiting = inbox_.waiting();
  stats.sessions = session_count_.load(std::memory_order_relaxed);
  stats.session_memory_bytes = session_bytes_.load(std::memory_order_relaxed);
  stats.sessions_evicted_total = evicted_total_.load(std::memory_order_relaxed);
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
  for (auto& [unused, task] : behind_session_) task->Abort(unavailable, now);
  running_.clear();
  ready_.clear();
  behind_session_.clear();
  inbox_.SetParked(0);
  PublishStats();
}

void Scheduler::Admit(std::unique_ptr<Request> request, absl::Time now) {
  if (!request->is_model_work()) {
    RunSessionOp(*request);
    return;
  }
  const std::string& session_id = request->kind == Request::Kind::kGenerate ? request->generate.session_id
                                  : request->kind == Request::Kind::kScore  ? request->score.session_id
                                                                            : request->add.session_id;
  session::Session* session = nullptr;
  if (!session_id.empty()) {
    absl::StatusOr<session::Session*> found = sessions_.Find(session_id);
    if (!found.ok()) {
      request->Fail(found.status(), now);
      return;
    }
    session = *found;
  }
  const uint64_t id = next_task_id_++;
  std::unique_ptr<Task> task;
  if (request->kind == Request::Kind::kGenerate) {
    const uint64_t seed = request->generate.sampling.seed.value_or(seed_rng_());
    task = std::make_unique<GenerateTask>(id, std::move(request->generate),
                                          std::move(request->knn_lm), std::move(request->stream),
                                          request->submit_time, seed, session);
  } else if (request->kind == Request::Kind::kScore) {
    task = std::make_unique<ScoreTask>(id, std::move(request->score), std::move(request->knn_lm),
                                       std::move(request->score_done), session);
  } else {
    task = std::make_unique<DatastoreAddTask>(id, std::move(request->add),
                                              config_.max_session_datastore_entries,
                                              config_.model_id, std::move(request->add_done),
                                              session);
  }
  if (session == nullptr) {
    ready_.push_back(std::move(task));
  } else if (session->busy) {
    session->waiting.push_back(id);
    behind_session_.emplace(id, std::move(task));
  } else {
    session->busy = true;
    sessions_.Touch(*session);
    ready_.push_back(std::move(task));
  }
}

void Scheduler::RunSessionOp(Request& request) {
  switch (request.kind) {
    case Request::Kind::kCreateSession: {
      absl::StatusOr<session::Session*> created =
          sessions_.Create(request.session_id, request.knn_capacity);
      if (!created.ok()) {
        request.session_done(created.status());
      } else {
        request.session_done(Info(**created));
      }
      break;
    }
    case Request::Kind::kGetSession: {
      absl::StatusOr<session::Session*> found = sessions_.Find(request.session_id);
      if (!found.ok()) {
        request.session_done(found.status());
      } else {
        request.session_done(Info(**found));
      }
      break;
    }
    case Request::Kind::kListSessions: {
      std::vector<engine::SessionInfo> infos;
      for (const session::Session* s : sessions_.List()) infos.push_back(Info(*s));
      request.list_done(std::move(infos));
      break;
    }
    case Request::Kind::kDeleteSession:
      request.status_done(sessions_.Delete(request.session_id));
      CountSessionDatastores();
      break;
    case Request::Kind::kGetSessionDatastore: {
      absl::StatusOr<session::Session*> found = sessions_.Find(request.session_id);
      if (!found.ok()) {
        request.datastore_done(found.status());
      } else {
        request.datastore_done(SessionDatastoreInfo(**found, config_.model_id));
      }
      break;
    }
    default:
      break;
  }
  PublishStats();
}

void Scheduler::StartReady() {
  while (!ready_.empty() && static_cast<int>(running_.size()) < config_.max_running) {
    running_.push_back(std::move(ready_.front()));
    ready_.pop_front();
  }
}

void Scheduler::RunIteration() {
  using TaskIt = std::list<std::unique_ptr<Task>>::iterator;
  DecodeBatch batch;
  StepContext ctx{*model_, config_.clock(), memory_options_, config_.knn_search_observer,
                  config_.batch_decode ? &batch : nullptr, &memory_pool_};
  const int seg_len = model_->config().seg_len;
  int64_t prefill_left = config_.max_prefill_tokens;
  bool prefilled = false;
  std::vector<TaskIt> done, deferred, prefills;
  absl::Mutex mu;  // guards `done` and `taken` (below): decode workers run prefills too
  // Steps a task once with `step_ctx`; records it in `done` when it finished.
  auto step = [&](TaskIt it, StepContext& step_ctx) {
    Task& task = **it;
    step_ctx.now = config_.clock();
    bool finished = false;
    try {
      util::ScopedOmpThreads prefill_threads(task.WantsPrefill() ? config_.prefill_threads : 0);
      finished = task.Step(step_ctx);
    } catch (const std::exception& e) {  // a LibTorch error outside the model boundary
      task.Abort(absl::InternalError(absl::StrCat("request failed: ", e.what())), step_ctx.now);
      finished = true;
    }
    if (finished) {
      absl::MutexLock lock(&mu);
      done.push_back(it);
    }
  };
  // Decoding tasks step now (each adds its token to the batch); prefills wait for the batch.
  for (auto it = running_.begin(); it != running_.end(); ++it) {
    Task& task = **it;
    if (task.WantsPrefill() && !task.cancelled()) {
      // The first prefill always runs, so prefills progress even with a zero budget.
      if (prefilled && prefill_left <= 0) {
        deferred.push_back(it);
        continue;
      }
      prefilled = true;
      prefill_left -= seg_len;
      prefills.push_back(it);
      continue;
    }
    step(it, ctx);
  }
  // The batch's rows decode on the decoder's workers while this thread prefills (a prefill
  // touches only its own sequence); a worker done with its rows takes the next prefill that may
  // run off this thread (Task::PrefillsAnywhere), so both cores stay busy while prompts wait.
  // Then the completions run here, which may finish tasks.
  std::vector<bool> taken(prefills.size(), false);
  const std::thread::id loop_thread = std::this_thread::get_id();
  auto prefill_work = [&] {
    const bool on_loop = std::this_thread::get_id() == loop_thread;
    // A worker's prefills add no decode rows (a prompt chunk never decodes), and must not.
    StepContext local{*model_, ctx.now, memory_options_, config_.knn_search_observer,
                      on_loop ? ctx.decode_batch : nullptr};
    for (;;) {
      TaskIt next;
      {
        absl::MutexLock lock(&mu);
        size_t i = 0;
        while (i < prefills.size() && (taken[i] || !(on_loop || (*prefills[i])->PrefillsAnywhere()))) {
          ++i;
        }
        if (i == prefills.size()) return;
        taken[i] = true;
        next = prefills[i];
      }
      step(next, local);
    }
  };
  int rows = prefills.empty() ? batch.Run(decoder_) : batch.RunAlongside(decoder_, prefill_work);
  if (batch.size() > 0) rows += batch.Run(decoder_);  // rows a prefilling task added, if any
  if (rows > 0 && config_.decode_batch_observer) config_.decode_batch_observer(rows);
  for (auto it : done) {
    Release(**it);
    // A one-shot request's memory goes back to the pool, emptied, for the next request (no
    // ~7.7 MB allocation and zero-fill per request).
    memory_pool_.Give((*it)->TakeOneShotMemory());
    running_.erase(it);
  }
  // Prefills that did not fit go first next time (in their order), so none waits forever.
  for (auto it = deferred.rbegin(); it != deferred.rend(); ++it) {
    running_.splice(running_.begin(), running_, *it);
  }
}

void Scheduler::ReapCancelledWaiting(absl::Time now) {
  StepContext ctx{*model_, now, memory_options_, config_.knn_search_observer};
  for (auto it = ready_.begin(); it != ready_.end();) {
    if ((*it)->cancelled()) {
      (*it)->Step(ctx);  // a cancelled generate finishes without model work
      Release(**it);
      it = ready_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = behind_session_.begin(); it != behind_session_.end();) {
    auto current = it++;
    Task& task = *current->second;
    if (!task.cancelled()) continue;
    task.Step(ctx);
    std::deque<uint64_t>& waiting = task.session()->waiting;
    for (auto w = waiting.begin(); w != waiting.end(); ++w) {
      if (*w == task.id()) {
        waiting.erase(w);
        break;
      }
    }
    behind_session_.erase(current);
  }
}

// Hands the task's session to the next request waiting for it, or marks it idle.
void Scheduler::Release(Task& task) {
  session::Session* session = task.session();
  if (session == nullptr) return;
  sessions_.Touch(*session);
  while (!session->waiting.empty()) {
    const uint64_t next = session->waiting.front();
    session->waiting.pop_front();
    auto it = behind_session_.find(next);
    if (it == behind_session_.end()) continue;
    ready_.push_back(std::move(it->second));
    behind_session_.erase(it);
    return;  // stays busy
  }
  session->busy = false;
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
  const int parked = static_cast<int>(ready_.size() + behind_session_.size());
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
  info.memory.bytes = session.bytes;
  info.create_time = session.create_time;
  info.last_use_time = session.last_use_time;
  info.busy = session.busy;
  return info;
}

}  // namespace mnemo::scheduler
