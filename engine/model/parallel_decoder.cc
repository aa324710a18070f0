#include "engine/model/parallel_decoder.h"

#include <algorithm>
#include <unordered_set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/util/omp_threads.h"

namespace mnemo::model {
namespace {

// [rows, ...] results of consecutive shards, in order, as one.
DecodeBatchResult Concatenate(std::vector<DecodeBatchResult> parts) {
  DecodeBatchResult all;
  std::vector<torch::Tensor> logprobs;
  bool any_keys = false;
  for (const DecodeBatchResult& part : parts) {
    logprobs.push_back(part.logprobs);
    all.exit_layers.insert(all.exit_layers.end(), part.exit_layers.begin(), part.exit_layers.end());
    any_keys = any_keys || part.knn_lm_keys.defined();
  }
  all.logprobs = torch::cat(logprobs, 0);
  if (any_keys) {
    std::vector<torch::Tensor> keys;
    int64_t width = 0;
    for (const DecodeBatchResult& part : parts) {
      if (part.knn_lm_keys.defined()) width = part.knn_lm_keys.size(1);
    }
    for (const DecodeBatchResult& part : parts) {
      keys.push_back(part.knn_lm_keys.defined()
                         ? part.knn_lm_keys
                         : torch::zeros({part.logprobs.size(0), width}, torch::kFloat32));
    }
    all.knn_lm_keys = torch::cat(keys, 0);
  }
  return all;
}

// `rows` in `shards` contiguous parts whose sizes differ by at most one row.
std::vector<absl::Span<const DecodeRow>> Split(absl::Span<const DecodeRow> rows, int shards) {
  std::vector<absl::Span<const DecodeRow>> parts;
  const size_t base = rows.size() / shards, extra = rows.size() % shards;
  for (size_t s = 0, start = 0; s < static_cast<size_t>(shards); ++s) {
    const size_t length = base + (s < extra ? 1 : 0);
    parts.push_back(rows.subspan(start, length));
    start += length;
  }
  return parts;
}

// The shards' results as one step's, or the first shard's error.
absl::StatusOr<DecodeBatchResult> Gather(std::vector<absl::StatusOr<DecodeBatchResult>> results) {
  std::vector<DecodeBatchResult> done;
  for (size_t s = 0; s < results.size(); ++s) {
    if (!results[s].ok()) {
      return absl::Status(results[s].status().code(),
                          absl::StrCat("decode shard ", s, ": ", results[s].status().message()));
    }
    done.push_back(*std::move(results[s]));
  }
  return done.size() == 1 ? std::move(done[0]) : Concatenate(std::move(done));
}

}  // namespace

ParallelDecoder::ParallelDecoder(Model& model, ParallelDecoderOptions options)
    : options_(options) {
  options_.threads = std::max(1, options_.threads);
  options_.min_shard_rows = std::max(1, options_.min_shard_rows);
  for (int t = 0; t < options_.threads; ++t) {
    decoders_.push_back(std::make_unique<BatchDecoder>(model, options_.decoder));
  }
  jobs_.resize(options_.threads);
  for (int w = 0; w + 1 < options_.threads; ++w) {
    workers_.emplace_back([this, w] { WorkerLoop(w + 1); });
  }
}

ParallelDecoder::~ParallelDecoder() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

int ParallelDecoder::ShardsFor(int64_t rows) const {
  return static_cast<int>(
      std::clamp<int64_t>(rows / options_.min_shard_rows, 1, options_.threads));
}

absl::StatusOr<DecodeBatchResult> ParallelDecoder::RunShard(BatchDecoder& decoder,
                                                            absl::Span<const DecodeRow> rows) {
  util::ScopedOmpThreads one_thread(1);  // LibTorch, OpenMP and OpenBLAS on this thread
  return decoder.Step(rows);
}

void ParallelDecoder::WorkerLoop(int worker) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_ready_.wait(lock, [&] { return stopping_ || jobs_[worker].pending; });
    if (stopping_) return;
    absl::Span<const DecodeRow> rows = jobs_[worker].rows;
    const absl::FunctionRef<void()>* work = jobs_[worker].work;
    lock.unlock();
    absl::StatusOr<DecodeBatchResult> result = absl::UnknownError("not run");
    if (!rows.empty()) result = RunShard(*decoders_[worker], rows);
    std::exception_ptr error;
    if (work != nullptr) {
      try {
        (*work)();
      } catch (...) {
        error = std::current_exception();
      }
    }
    lock.lock();
    jobs_[worker].result = std::move(result);
    jobs_[worker].error = error;
    jobs_[worker].pending = false;
    work_done_.notify_all();
  }
}

void ParallelDecoder::Post(const std::vector<absl::Span<const DecodeRow>>& parts,
                           int first_worker, const absl::FunctionRef<void()>* work) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < parts.size(); ++i) {
      Job& job = jobs_[first_worker + i];
      job.rows = parts[i];
      job.work = work;
      job.error = nullptr;
      job.pending = true;
    }
  }
  work_ready_.notify_all();
}

std::vector<absl::StatusOr<DecodeBatchResult>> ParallelDecoder::Wait(int first_worker,
                                                                     int count) {
  std::vector<absl::StatusOr<DecodeBatchResult>> results;
  std::unique_lock<std::mutex> lock(mu_);
  work_done_.wait(lock, [&] {
    for (int w = first_worker; w < first_worker + count; ++w) {
      if (jobs_[w].pending) return false;
    }
    return true;
  });
  std::exception_ptr error;
  for (int w = first_worker; w < first_worker + count; ++w) {
    results.push_back(std::move(jobs_[w].result));
    if (error == nullptr) error = jobs_[w].error;
    jobs_[w].error = nullptr;
  }
  if (error != nullptr) std::rethrow_exception(error);
  return results;
}

absl::StatusOr<DecodeBatchResult> ParallelDecoder::Step(absl::Span<const DecodeRow> rows) {
  const int shards = ShardsFor(static_cast<int64_t>(rows.size()));
  if (shards == 1) {
    // With threads > 1 this object owns the parallelism: one shard runs on one thread too
    // (a lone decode row gains nothing from LibTorch's intra-op threads but their wake-ups).
    return options_.threads > 1 ? RunShard(*decoders_[0], rows) : decoders_[0]->Step(rows);
  }
  // Every check before any shard changes a memory: a shard's rejection would otherwise leave
  // the other shards' rows advanced. (A memory repeated across shards is caught here too.)
  if (absl::Status s = decoders_[0]->Validate(rows); !s.ok()) return s;
  std::vector<absl::Span<const DecodeRow>> parts = Split(rows, shards);
  Post({parts.begin() + 1, parts.end()}, /*first_worker=*/1);
  std::vector<absl::StatusOr<DecodeBatchResult>> results;
  results.push_back(RunShard(*decoders_[0], parts[0]));
  for (auto& result : Wait(1, shards - 1)) results.push_back(std::move(result));
  return Gather(std::move(results));
}

absl::StatusOr<DecodeBatchResult> ParallelDecoder::StepAlongside(
    absl::Span<const DecodeRow> rows, absl::FunctionRef<void()> caller_work,
    absl::FunctionRef<void()> worker_work) {
  const int workers = options_.threads - 1;
  if (workers == 0) {
    caller_work();
    return Step(rows);
  }
  if (absl::Status s = decoders_[0]->Validate(rows); !s.ok()) {
    RunOnAll(caller_work, worker_work);
    return s;
  }
  const int shards = static_cast<int>(std::clamp<int64_t>(
      static_cast<int64_t>(rows.size()) / options_.min_shard_rows, 1, workers));
  std::vector<absl::Span<const DecodeRow>> parts = Split(rows, shards);
  parts.resize(workers);  // workers without a shard start on the work at once
  std::vector<absl::StatusOr<DecodeBatchResult>> results =
      RunWithWorkers(parts, caller_work, worker_work);
  results.resize(shards);
  return Gather(std::move(results));
}

void ParallelDecoder::RunOnAll(absl::FunctionRef<void()> caller_work,
                               absl::FunctionRef<void()> worker_work) {
  RunWithWorkers(std::vector<absl::Span<const DecodeRow>>(options_.threads - 1), caller_work,
                 worker_work);
}

std::vector<absl::StatusOr<DecodeBatchResult>> ParallelDecoder::RunWithWorkers(
    const std::vector<absl::Span<const DecodeRow>>& parts, absl::FunctionRef<void()> caller_work,
    absl::FunctionRef<void()> worker_work) {
  const int workers = static_cast<int>(parts.size());
  Post(parts, /*first_worker=*/1, &worker_work);
  try {
    caller_work();
  } catch (...) {
    Wait(1, workers);  // the workers hold the caller's rows and `work`
    throw;
  }
  return Wait(1, workers);
}

}  // namespace mnemo::model
