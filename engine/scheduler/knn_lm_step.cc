#include "engine/scheduler/knn_lm_step.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/util/status_macros.h"

namespace mnemo::scheduler {

constexpr int kMaxK = 1024;

absl::StatusOr<KnnLmPlan> ResolveKnnLm(const engine::KnnLmOptions& options,
                                       const std::string& session_id,
                                       const datastore::DatastoreCatalog& catalog) {
  KnnLmPlan plan;
  plan.datastore = options.datastore;
  datastore::KnnLmDefaults defaults;  // a session's store takes the built-in defaults
  if (options.datastore.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "knn_lm.datastore must name a datastore (loaded: ", catalog.Names(),
        "; or \"", datastore::kSessionDatastoreName, "\" for the session's own)"));
  }
  if (options.datastore == datastore::kSessionDatastoreName) {
    if (session_id.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "knn_lm.datastore \"", datastore::kSessionDatastoreName,
          "\" reads the session's private datastore and needs a session_id"));
    }
  } else {
    const datastore::DatastoreCatalog::Entry* entry = catalog.Find(options.datastore);
    if (entry == nullptr) {
      return absl::NotFoundError(absl::StrCat("knn_lm.datastore \"", options.datastore,
                                              "\" is not loaded (loaded: ", catalog.Names(),
                                              "; start mnemo-server with --datastore NAME=DIR)"));
    }
    plan.shared = entry->store.get();
    defaults = entry->defaults;
  }
  plan.mix.lambda = options.lambda.value_or(defaults.lambda);
  plan.mix.temperature = options.temperature.value_or(defaults.temperature);
  plan.search.k = options.k > 0 ? options.k : defaults.k;
  plan.search.nprobe = defaults.nprobe;
  if (!(plan.mix.lambda >= 0 && plan.mix.lambda <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("knn_lm.lambda must be in [0, 1], got ", plan.mix.lambda));
  }
  if (!(plan.mix.temperature > 0) || std::isinf(plan.mix.temperature)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "knn_lm.temperature must be a finite number > 0, got ", plan.mix.temperature));
  }
  if (options.k < 0 || options.k > kMaxK) {
    return absl::InvalidArgumentError(
        absl::StrCat("knn_lm.k must be in [0, ", kMaxK, "] (0 = default), got ", options.k));
  }
  return plan;
}

absl::Status CheckKnnLmReady(const KnnLmPlan& plan, const session::Session* session) {
  if (plan.shared != nullptr) return absl::OkStatus();
  if (session == nullptr || session->datastore == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "knn_lm.datastore \"", datastore::kSessionDatastoreName, "\": session ",
        session != nullptr ? session->id : "", " has no private datastore yet; add text to it "
        "with Datastores.AddToSessionDatastore"));
  }
  return absl::OkStatus();
}

absl::StatusOr<torch::Tensor> ApplyKnnLm(const KnnLmPlan& plan, const session::Session* session,
                                         const torch::Tensor& keys,
                                         const torch::Tensor& lm_logprobs,
                                         const KnnSearchObserver& observer) {
  MNEMO_RETURN_IF_ERROR(CheckKnnLmReady(plan, session));
  const datastore::NeighbourIndex* index =
      plan.shared != nullptr ? plan.shared : session->datastore.get();
  const absl::Time start = absl::Now();
  MNEMO_ASSIGN_OR_RETURN(std::vector<std::vector<datastore::Hit>> hits,
                         index->Search(keys, plan.search));
  if (observer) observer(absl::Now() - start, keys.size(0));
  return datastore::KnnLmLogProbs(lm_logprobs, hits, plan.mix);
}

}  // namespace mnemo::scheduler
