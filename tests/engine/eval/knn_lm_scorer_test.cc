// kNN-LM scoring on a tiny random model and tiny datastores: the O(k) target formula agrees
// with datastore::KnnLmLogProbs, λ = 0 is the model alone bit for bit, and a datastore built
// from the scored text itself lowers its bpb.
#include "engine/eval/knn_lm_scorer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "engine/datastore/builder.h"
#include "engine/datastore/datastore.h"
#include "engine/datastore/knn_lm.h"
#include "engine/datastore/model_id.h"
#include "engine/eval/scorer.h"
#include "tests/engine/eval/eval_test_util.h"

namespace mnemo::eval {
namespace {

namespace fs = std::filesystem;
using datastore::Hit;

TEST(KnnLmTargetTest, MatchesKnnLmLogProbs) {
  constexpr int kRows = 40;
  constexpr int kVocab = 259;
  torch::manual_seed(3);
  const torch::Tensor lm = torch::log_softmax(torch::randn({kRows, kVocab}) * 3, 1);  // [Q, V]
  std::mt19937 rng(5);
  std::vector<std::vector<Hit>> hits(kRows);
  std::vector<int> targets(kRows);
  for (int r = 0; r < kRows; ++r) {
    const int k = r % 7 == 0 ? 0 : 1 + static_cast<int>(rng() % 16);  // some rows without hits
    for (int j = 0; j < k; ++j) {
      hits[r].push_back(Hit{j, static_cast<float>(rng() % 1000) / 10.0f,
                            static_cast<int32_t>(rng() % 6)});  // values 0..5: many repeats
    }
    targets[r] = static_cast<int>(rng() % 8);  // sometimes a value no hit carries
  }
  auto a = lm.accessor<float, 2>();
  for (float lambda : {0.0f, 0.1f, 0.5f, 0.9f, 1.0f}) {
    for (float t : {0.5f, 5.0f, 50.0f}) {
      auto full = datastore::KnnLmLogProbs(lm, hits, {lambda, t});
      ASSERT_TRUE(full.ok()) << full.status();
      auto f = full->accessor<float, 2>();
      for (int r = 0; r < kRows; ++r) {
        const double lk = KnnTargetLogProb(hits[r], targets[r], t);
        const double mine =
            MixTargetLogProb(a[r][targets[r]], lk, hits[r].empty() ? 0.0f : lambda);
        const double ref = f[r][targets[r]];
        if (std::isinf(ref)) {
          EXPECT_TRUE(std::isinf(mine) && mine < 0) << "row " << r;
        } else {
          EXPECT_NEAR(mine, ref, 1e-4 + 1e-6 * std::abs(ref))
              << "row " << r << " lambda " << lambda << " T " << t;
        }
      }
    }
  }
}

TEST(KnnLmTargetTest, ProbabilityOfAllHitsOnTheTargetIsOne) {
  const std::vector<Hit> hits = {{0, 1.0f, 7}, {1, 2.0f, 7}, {2, 30.0f, 7}};
  EXPECT_DOUBLE_EQ(KnnTargetLogProb(hits, 7, 1.0f), 0.0);
  EXPECT_EQ(KnnTargetLogProb(hits, 8, 1.0f), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(KnnTargetLogProb({}, 7, 1.0f), -std::numeric_limits<double>::infinity());
  // Half of the mass: two equally distant hits, one on the target.
  EXPECT_NEAR(KnnTargetLogProb({{0, 4.0f, 1}, {1, 4.0f, 2}}, 1, 2.0f), std::log(0.5), 1e-12);
  EXPECT_EQ(MixTargetLogProb(-3.25, 0.0, 0.0f), -3.25);
  EXPECT_NEAR(MixTargetLogProb(std::log(0.2), std::log(0.6), 0.5f), std::log(0.4), 1e-12);
}

class KnnLmScorerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("mnemo_knn_lm_scorer_test_" +
                                         std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    model_ = testing::TinyModel(11);
    ASSERT_TRUE(model_->Save((root_ / "model").string()).ok());
    auto id = datastore::ComputeModelId((root_ / "model").string());
    ASSERT_TRUE(id.ok()) << id.status();
    id_ = *id;
  }
  void TearDown() override { fs::remove_all(root_); }

  // A flat (exact) datastore over `text`, written to root/NAME.
  std::unique_ptr<datastore::Datastore> BuildFrom(const std::string& name, const std::string& text) {
    const fs::path file = root_ / (name + ".py");
    std::ofstream(file, std::ios::binary) << text;
    datastore::BuildOptions options;
    options.index = datastore::IndexChoice::kFlat;
    options.chunk_tokens = 100;  // differs from the scorer's chunk on purpose
    const std::vector<datastore::SourceFile> files = {
        {file.string(), static_cast<int64_t>(text.size())}};
    auto manifest = datastore::BuildDatastore(*model_, id_, files, (root_ / name).string(),
                                              options, nullptr);
    EXPECT_TRUE(manifest.ok()) << manifest.status();
    auto store = datastore::Datastore::Open((root_ / name).string(), id_);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }

  static KnnLmScoreOptions Options() {
    KnnLmScoreOptions options;
    options.search.k = 8;
    options.grid.lambdas = {0.0f, 0.25f, 0.5f, 0.75f};
    options.grid.temperatures = {0.1f, 1.0f, 10.0f};
    options.score.chunk = 64;
    return options;
  }

  fs::path root_;
  std::unique_ptr<model::Model> model_;
  datastore::ModelId id_;
};

TEST_F(KnnLmScorerTest, LambdaZeroIsTheModelAloneExactly) {
  auto store = BuildFrom("other", testing::CodeText(1500, 21));
  ASSERT_NE(store, nullptr);
  const std::string text = testing::CodeText(700, 22);
  const KnnLmScoreOptions options = Options();
  auto knn = ScoreWithKnnLm(*model_, *store, text, options);
  ASSERT_TRUE(knn.ok()) << knn.status();
  auto alone = ScoreWithMemory(*model_, options.memory, text, options.score);
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_EQ(knn->lm.bytes, 700);
  EXPECT_EQ(knn->queries, 700);
  EXPECT_EQ(knn->hits, 700 * 8);
  EXPECT_EQ(knn->lm.logprob, alone->logprob);  // bit for bit
  EXPECT_EQ(knn->lm.Bpb(), alone->Bpb());
  ASSERT_EQ(knn->logprob.size(), options.grid.size());
  for (size_t p = 0; p < options.grid.size(); ++p) {
    if (options.grid.lambda(p) == 0.0f) {
      EXPECT_EQ(knn->logprob[p], alone->logprob) << "pair " << p;
    } else {
      EXPECT_NE(knn->logprob[p], alone->logprob) << "pair " << p;  // the datastore does act
    }
  }
}

TEST_F(KnnLmScorerTest, DatastoreOfTheScoredTextLowersItsBpb) {
  const std::string text = testing::CodeText(900, 23);
  auto store = BuildFrom("self", text);
  ASSERT_NE(store, nullptr);
  const KnnLmScoreOptions options = Options();
  auto knn = ScoreWithKnnLm(*model_, *store, text, options);
  ASSERT_TRUE(knn.ok()) << knn.status();
  // Each position finds its own key (distance ~0, float16 rounding only) whose value is the
  // true next byte, so with a sharp temperature half the weight on p_kNN costs at most
  // about one bit per byte; the random model alone is near log2(259) = 8 bits.
  const double alone = knn->lm.Bpb();
  EXPECT_GT(alone, 4.0);
  const size_t sharp_half = 2 * options.grid.temperatures.size() + 0;  // λ 0.5, T 0.1
  ASSERT_EQ(options.grid.lambda(sharp_half), 0.5f);
  ASSERT_EQ(options.grid.temperature(sharp_half), 0.1f);
  EXPECT_LT(knn->Bpb(sharp_half), 1.2) << "model alone " << alone;
  EXPECT_LT(knn->nearest_distance / static_cast<double>(knn->queries), 1e-3);
}

TEST_F(KnnLmScorerTest, RejectsABadGrid) {
  auto store = BuildFrom("small", testing::CodeText(300, 24));
  ASSERT_NE(store, nullptr);
  KnnLmScoreOptions options = Options();
  options.grid.lambdas = {1.5f};
  EXPECT_EQ(ScoreWithKnnLm(*model_, *store, "abc", options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options = Options();
  options.grid.temperatures = {0.0f};
  EXPECT_EQ(ScoreWithKnnLm(*model_, *store, "abc", options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options = Options();
  options.grid.lambdas.clear();
  EXPECT_EQ(ScoreWithKnnLm(*model_, *store, "abc", options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(KnnLmScorerTest, MeasuresSearchLatencyOnRealKeys) {
  auto store = BuildFrom("latency", testing::CodeText(400, 25));
  ASSERT_NE(store, nullptr);
  auto latency = MeasureSearchLatency(*model_, *store, testing::CodeText(200, 26), 50, Options());
  ASSERT_TRUE(latency.ok()) << latency.status();
  EXPECT_EQ(latency->queries, 50);
  EXPECT_GT(latency->single_mean_us, 0.0);
  EXPECT_LE(latency->single_p50_us, latency->single_p99_us);
}

}  // namespace
}  // namespace mnemo::eval
