#include "engine/model/parallel_decoder.h"

#include <algorithm>
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

ParallelDecoder::ParallelDecoder(Model& model, ParallelDecoderOptions options,
                                 util::WorkerPool& workers)
    : options_(options), workers_(workers) {
  options_.threads = std::clamp(options_.threads, 1, workers_.size() + 1);
  options_.min_shard_rows = std::max(1, options_.min_shard_rows);
  for (int t = 0; t < options_.threads; ++t) {
    decoders_.push_back(std::make_unique<BatchDecoder>(model, options_.decoder));
  }
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

absl::StatusOr<DecodeBatchResult> ParallelDecoder::Step(absl::Span<const DecodeRow> rows) {
  const int shards = ShardsFor(static_cast<int64_t>(rows.size()));
  if (shards == 1) {
    // With threads > 1 this object owns the parallelism: one shard runs on one thread too
    // (a lone row of a cache-resident model gains nothing from LibTorch's intra-op threads but
    // their wake-ups). A large model runs with threads = 1 (scheduler/thread_plan.h), and its
    // products split their columns over the intra-op threads.
    return options_.threads > 1 ? RunShard(*decoders_[0], rows) : decoders_[0]->Step(rows);
  }
  // Every check before any shard changes a memory: a shard's rejection would otherwise leave
  // the other shards' rows advanced. (A memory repeated across shards is caught here too.)
  if (absl::Status s = decoders_[0]->Validate(rows); !s.ok()) return s;
  const std::vector<absl::Span<const DecodeRow>> parts = Split(rows, shards);
  std::vector<absl::StatusOr<DecodeBatchResult>> results(shards);
  workers_.Run(
      shards - 1,
      [&](int worker) { results[worker + 1] = RunShard(*decoders_[worker + 1], parts[worker + 1]); },
      [&] { results[0] = RunShard(*decoders_[0], parts[0]); });
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
  // The rows on the workers alone; workers without a shard start on the work at once.
  const int shards = static_cast<int>(std::clamp<int64_t>(
      static_cast<int64_t>(rows.size()) / options_.min_shard_rows, 1, workers));
  const std::vector<absl::Span<const DecodeRow>> parts = Split(rows, shards);
  std::vector<absl::StatusOr<DecodeBatchResult>> results(shards);
  workers_.Run(
      workers,
      [&](int worker) {
        if (worker < shards) results[worker] = RunShard(*decoders_[worker + 1], parts[worker]);
        worker_work();
      },
      caller_work);
  return Gather(std::move(results));
}

void ParallelDecoder::RunOnAll(absl::FunctionRef<void()> caller_work,
                               absl::FunctionRef<void()> worker_work) {
  workers_.Run(options_.threads - 1, [&](int) { worker_work(); }, caller_work);
}

}  // namespace mnemo::model
