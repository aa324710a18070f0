// BatchDecoder: a batched decode step must equal feeding each row alone (Model::Forward /
// ForwardWithExit with one token), in log-probs, exit layers and in what every memory holds
// afterwards, for rows at very different positions and with different memory options.
#include "engine/model/batch_decoder.h"

#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "tests/engine/model/exit_test_util.h"
#include "tests/engine/tiny_model.h"

namespace mnemo::model {
namespace {

using ::mnemo::testing::MaxDiff;
using ::mnemo::testing::RandomBytes;

// 3 layers with a conv-compressed memory and a kNN layer on a knn::KnnMemory store.
ModelConfig Config() {
  ModelConfig c = ::mnemo::testing::TinyMemoryModelConfig(Compression::kConv);
  c.clamp_len = 30;  // below the farthest compressed slot: clamping is exercised
  return c;
}

void ExpectSameMemory(const memory::SessionMemory& a, const memory::SessionMemory& b,
                      const std::string& what) {
  ASSERT_EQ(a.next_position(), b.next_position()) << what;
  EXPECT_EQ(a.xl_tokens(), b.xl_tokens()) << what;
  EXPECT_EQ(a.compressed_slots(), b.compressed_slots()) << what;
  EXPECT_EQ(a.knn_entries(), b.knn_entries()) << what;
  for (int i = 0; i < a.num_layers(); ++i) {
    const memory::LayerMemory& x = a.layer(i);
    const memory::LayerMemory& y = b.layer(i);
    ASSERT_EQ(x.k_raw().scalar_type(), y.k_raw().scalar_type()) << what;
    // Float16 rings: a value the batched matmuls round differently from the solo ones (~1e-7)
    // may land on the neighbouring float16 value, one unit in its last place (2^-10 relative)
    // away; counted as 0 here, anything further as it is.
    auto diff = [](const torch::Tensor& p, const torch::Tensor& q) {
      if (p.scalar_type() != torch::kFloat16) return MaxDiff(p, q);
      const torch::Tensor a = p.to(torch::kFloat32), b = q.to(torch::kFloat32);
      const torch::Tensor d = (a - b).abs();
      return d.masked_fill(d <= a.abs() * (1.0f / 1024) + 1e-7f, 0.0f).max().item<float>();
    };
    EXPECT_LT(diff(x.k_raw(), y.k_raw()), 1e-5) << what << " layer " << i;
    EXPECT_LT(diff(x.v_raw(), y.v_raw()), 1e-5) << what << " layer " << i;
    ASSERT_EQ(x.k_cmp().defined(), y.k_cmp().defined()) << what;
    if (x.k_cmp().defined()) {
      EXPECT_LT(diff(x.k_cmp(), y.k_cmp()), 1e-5) << what << " layer " << i;
      EXPECT_LT(diff(x.v_cmp(), y.v_cmp()), 1e-5) << what << " layer " << i;
    }
    ASSERT_EQ(x.knn_store() == nullptr, y.knn_store() == nullptr) << what;
    if (x.knn_store() != nullptr) {
      EXPECT_EQ(x.knn_store()->next_position(), y.knn_store()->next_position()) << what;
      EXPECT_EQ(x.knn_store()->size(), y.knn_store()->size()) << what;
    }
  }
}

// One session fed two ways: `batched` through BatchDecoder, `solo` through Model alone.
struct Session {
  memory::SessionMemory batched, solo;
  std::vector<int> text;  // the tokens it decodes, one per step it takes part in
  size_t next = 0;
  float threshold = 2.0f;
  ExitMeasure measure = ExitMeasure::kSoftmaxResponse;
};

class BatchDecoderTest : public ::testing::TestWithParam<AttentionLayout> {
 protected:
  void SetUp() override {
    model_ = Model::Random(Config(), 11);
    model_->SetExitClassifier(::mnemo::testing::RandomExitClassifier(Config(), 12));
  }

  // A session primed with `history` tokens (seed-dependent), then `steps` tokens to decode.
  std::unique_ptr<Session> Primed(int history, uint32_t seed, const MemoryOptions& options = {}) {
    auto s = std::make_unique<Session>();
    s->batched = model_->NewMemory(options);
    s->solo = model_->NewMemory(options);
    if (history > 0) {
      std::vector<int> prefix = RandomBytes(history, seed);
      EXPECT_TRUE(model_->Forward(prefix, s->batched).ok());
      EXPECT_TRUE(model_->Forward(prefix, s->solo).ok());
    }
    s->text = RandomBytes(64, seed + 1000);
    s->text[0] = history % 256;  // RandomBytes starts with BOS; any byte will do mid-text
    return s;
  }

  // One batched step over `sessions` vs. each alone; checks log-probs and exit layers.
  void StepAndCompare(const std::vector<Session*>& sessions, BatchDecoder& decoder,
                      const std::string& what) {
    std::vector<DecodeRow> rows;
    for (Session* s : sessions) {
      rows.push_back(DecodeRow{s->text[s->next], &s->batched, s->threshold, false, s->measure});
    }
    absl::StatusOr<DecodeBatchResult> out = decoder.Step(rows);
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->logprobs.sizes(), (std::vector<int64_t>{static_cast<int64_t>(rows.size()),
                                                            model_->config().vocab_size}));
    for (size_t r = 0; r < sessions.size(); ++r) {
      Session& s = *sessions[r];
      const int token = s.text[s.next++];
      if (s.threshold > 1.0f) {
        auto solo = model_->Forward({token}, s.solo, Outputs::kLast);
        ASSERT_TRUE(solo.ok());
        EXPECT_LT(MaxDiff(out->logprobs[r], (*solo)[0]), 1e-4) << what << " row " << r;
        EXPECT_EQ(out->exit_layers[r], model_->config().n_layers) << what << " row " << r;
      } else {
        auto solo = model_->ForwardWithExit({token}, s.solo, s.threshold, s.measure);
        ASSERT_TRUE(solo.ok());
        EXPECT_LT(MaxDiff(out->logprobs[r], solo->logprobs[0]), 1e-4) << what << " row " << r;
        EXPECT_EQ(out->exit_layers[r], solo->exit_layers[0]) << what << " row " << r;
      }
    }
  }

  // 16 steps of `sessions` against their solo twins; counts (through a probe step on clones)
  // how many rows exited early and how many ran to full depth.
  void RunExitSteps(BatchDecoder& decoder, const std::vector<Session*>& sessions, int* early,
                    int* full) {
    for (int step = 0; step < 16; ++step) {
      std::vector<DecodeRow> probe;
      std::vector<memory::SessionMemory> clones;
      clones.reserve(sessions.size());
      for (Session* s : sessions) {
        clones.push_back(s->batched.Clone());
        probe.push_back(
            DecodeRow{s->text[s->next], &clones.back(), s->threshold, false, s->measure});
      }
      auto out = decoder.Step(probe);
      ASSERT_TRUE(out.ok()) << out.status();
      for (int layer : out->exit_layers) (layer < model_->config().n_layers ? *early : *full)++;
      StepAndCompare(sessions, decoder, "step " + std::to_string(step));
    }
  }

  // After the steps: every memory equals its solo twin, and both continue alike.
  void ExpectSessionsAgree(const std::vector<Session*>& sessions) {
    std::vector<int> more = RandomBytes(40, 77);
    for (size_t r = 0; r < sessions.size(); ++r) {
      ExpectSameMemory(sessions[r]->batched, sessions[r]->solo, "row " + std::to_string(r));
      auto a = model_->Forward(more, sessions[r]->batched);
      auto b = model_->Forward(more, sessions[r]->solo);
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_LT(MaxDiff(*a, *b), 1e-4) << "continuation of row " << r;
    }
  }

  // `steps` batched steps of every session in `owned` against their solo twins, then
  // ExpectSessionsAgree.
  void StepTogetherAndCompare(const std::vector<std::unique_ptr<Session>>& owned, int steps) {
    std::vector<Session*> sessions;
    for (const auto& s : owned) sessions.push_back(s.get());
    BatchDecoder decoder(*model_, {GetParam()});
    for (int step = 0; step < steps; ++step) {
      StepAndCompare(sessions, decoder, "step " + std::to_string(step));
    }
    ExpectSessionsAgree(sessions);
  }

  std::unique_ptr<Model> model_;
};

TEST_P(BatchDecoderTest, MatchesSoloForwardAtMixedHistories) {
  // 0..2000 tokens of history: empty rings, partly filled, wrapped; 9 steps cross compressed
  // group boundaries (rate 4) in every row and wrap the raw ring (32 slots) in the long ones.
  std::vector<std::unique_ptr<Session>> owned;
  for (int history : {0, 5, 300, 700, 2000}) owned.push_back(Primed(history, history + 1));
  StepTogetherAndCompare(owned, 9);
}

TEST_P(BatchDecoderTest, RowsWithDifferentMemoryOptionsShareAStep) {
  MemoryOptions no_cmp, no_knn, small_knn;
  no_cmp.compressive = false;
  no_knn.knn = false;
  small_knn.knn_mem_len = 8;
  std::vector<std::unique_ptr<Session>> owned;
  owned.push_back(Primed(120, 3, no_cmp));
  owned.push_back(Primed(90, 4, no_knn));
  owned.push_back(Primed(200, 5, small_knn));
  owned.push_back(Primed(3, 6));
  StepTogetherAndCompare(owned, 6);
}

TEST_P(BatchDecoderTest, Float16RingsMatchSoloForward) {
  // Rows whose memories keep float16 rings (MemoryOptions::half_rings; one without compressed
  // memory) next to a float32 one: each matches the same memory fed alone, as float32 rows do
  // (both paths round a key or value the same way as they store it).
  MemoryOptions half, half_no_cmp;
  half.half_rings = true;
  half_no_cmp.half_rings = true;
  half_no_cmp.compressive = false;
  std::vector<std::unique_ptr<Session>> owned;
  for (int history : {0, 300, 2000}) owned.push_back(Primed(history, history + 31, half));
  owned.push_back(Primed(120, 34, half_no_cmp));
  owned.push_back(Primed(90, 35));
  ASSERT_EQ(owned[0]->batched.layer(0).k_raw().scalar_type(), torch::kFloat16);
  ASSERT_EQ(owned[1]->batched.layer(1).v_cmp().scalar_type(), torch::kFloat16);
  ASSERT_EQ(owned[4]->batched.layer(0).k_raw().scalar_type(), torch::kFloat32);
  StepTogetherAndCompare(owned, 9);
}

TEST_P(BatchDecoderTest, Float16RingsStayCloseToFloat32Rings) {
  // The same text through float32 and float16 memories: log-probs differ by the rounding of
  // the stored keys and values (float16 keeps 11 significant bits), not more, and they do
  // differ (the rings really are float16).
  MemoryOptions half;
  half.half_rings = true;
  std::vector<std::unique_ptr<Session>> owned;
  owned.push_back(Primed(700, 41));
  owned.push_back(Primed(700, 41, half));
  BatchDecoder decoder(*model_, {GetParam()});
  float largest = 0.0f;
  for (int step = 0; step < 24; ++step) {
    std::vector<DecodeRow> rows;
    for (auto& s : owned) rows.push_back(DecodeRow{s->text[s->next++], &s->batched});
    absl::StatusOr<DecodeBatchResult> out = decoder.Step(rows);
    ASSERT_TRUE(out.ok()) << out.status();
    largest = std::max(largest, MaxDiff(out->logprobs[0], out->logprobs[1]));
  }
  EXPECT_GT(largest, 0.0f);
  EXPECT_LT(largest, 2e-2f);
}

TEST_P(BatchDecoderTest, HalfWeightsMatchSoloForward) {
  // A model loaded with float16 or bfloat16 weights (LoadOptions::weight_dtype): the batched step
  // (half-width packed products) equals each row fed alone, with float16 rings too, and with
  // early exit.
  for (torch::ScalarType type : {torch::kFloat16, torch::kBFloat16}) {
    SCOPED_TRACE(WeightDtypeName(type));
    LoadOptions options;
    options.weight_dtype = type;
    model_ = Model::Random(Config(), 11, options);
    model_->SetExitClassifier(::mnemo::testing::RandomExitClassifier(Config(), 12));
    ASSERT_EQ(model_->weight_dtype(), type);
    MemoryOptions half_rings;
    half_rings.half_rings = true;
    std::vector<std::unique_ptr<Session>> owned;
    for (int history : {0, 300, 2000}) owned.push_back(Primed(history, history + 51));
    owned.push_back(Primed(120, 54, half_rings));
    owned[1]->threshold = ::mnemo::testing::HalfExitThreshold(
        *model_, ExitMeasure::kSoftmaxResponse, RandomBytes(200, 8));
    StepTogetherAndCompare(owned, 9);
  }
}

TEST_P(BatchDecoderTest, RowsJoinAndLeaveBetweenSteps) {
  std::vector<std::unique_ptr<Session>> owned;
  for (int i = 0; i < 6; ++i) owned.push_back(Primed(37 * i * i, 20 + i));
  BatchDecoder decoder(*model_, {GetParam()});
  for (int step = 0; step < 12; ++step) {
    // A different subset (and order) each step; session 5 joins only at step 6.
    std::vector<Session*> sessions;
    for (int i = 5; i >= 0; --i) {
      if ((i + step) % 3 != 0 && (i != 5 || step >= 6)) sessions.push_back(owned[i].get());
    }
    StepAndCompare(sessions, decoder, "step " + std::to_string(step));
  }
  std::vector<Session*> all;
  for (auto& s : owned) all.push_back(s.get());
  ExpectSessionsAgree(all);
}

TEST_P(BatchDecoderTest, PerRowExitMatchesSoloForwardWithExit) {
  const float half = ::mnemo::testing::HalfExitThreshold(*model_, ExitMeasure::kSoftmaxResponse,
                                                         RandomBytes(200, 8));
  std::vector<std::unique_ptr<Session>> owned;
  const std::vector<int> histories = {0, 9, 150, 400, 1000, 33};
  const std::vector<float> thresholds = {half, half, half * 0.5f, half * 2.0f, 2.0f, half};
  for (size_t i = 0; i < histories.size(); ++i) {
    owned.push_back(Primed(histories[i], 40 + i));
    owned.back()->threshold = thresholds[i];
  }
  std::vector<Session*> sessions;
  for (auto& s : owned) sessions.push_back(s.get());
  BatchDecoder decoder(*model_, {GetParam()});
  int early = 0, full = 0;
  RunExitSteps(decoder, sessions, &early, &full);
  ASSERT_GT(early, 10) << "too few early exits to test state propagation";
  ASSERT_GT(full, 10) << "too few full-depth rows";
  ExpectSessionsAgree(sessions);
}

TEST_P(BatchDecoderTest, MixedExitMeasuresInOneBatchMatchSolo) {
  // Every measure in one step, each row with a threshold that exits about half its tokens;
  // plus a full-depth row. Each row must match ForwardWithExit on its own measure.
  const std::vector<int> probe = RandomBytes(200, 8);
  std::vector<std::unique_ptr<Session>> owned;
  const std::vector<ExitMeasure> measures = {
      ExitMeasure::kClassifier, ExitMeasure::kHiddenSaturation, ExitMeasure::kSoftmaxResponse,
      ExitMeasure::kClassifier, ExitMeasure::kHiddenSaturation, ExitMeasure::kSoftmaxResponse,
      ExitMeasure::kClassifier};
  const std::vector<int> histories = {0, 9, 150, 400, 1000, 33, 70};
  for (size_t i = 0; i < measures.size(); ++i) {
    owned.push_back(Primed(histories[i], 60 + i));
    owned.back()->measure = measures[i];
    owned.back()->threshold =
        i + 1 == measures.size() ? 2.0f
                                 : ::mnemo::testing::HalfExitThreshold(*model_, measures[i], probe);
  }
  std::vector<Session*> sessions;
  for (auto& s : owned) sessions.push_back(s.get());
  BatchDecoder decoder(*model_, {GetParam()});
  int early = 0, full = 0;
  RunExitSteps(decoder, sessions, &early, &full);
  ASSERT_GT(early, 15) << "too few early exits";
  ASSERT_GT(full, 15) << "too few full-depth rows";
  ExpectSessionsAgree(sessions);
}

TEST_P(BatchDecoderTest, EveryRowExitingAtTheFirstLayerStillFillsEveryLayer) {
  std::vector<std::unique_ptr<Session>> owned;
  for (int history : {0, 70, 500}) {
    owned.push_back(Primed(history, history + 3));
    owned.back()->threshold = 0.0f;
  }
  std::vector<Session*> sessions;
  for (auto& s : owned) sessions.push_back(s.get());
  BatchDecoder decoder(*model_, {GetParam()});
  for (int step = 0; step < 5; ++step) StepAndCompare(sessions, decoder, "step");
  ExpectSessionsAgree(sessions);
}

TEST_P(BatchDecoderTest, HiddenSaturationExitsWhereCosineFirstReachesThreshold) {
  // Reference from a full-depth pass on a clone: before a row exits, its states are exactly
  // the full pass's, so the exit layer is the first i < L with cos(h_i, h_{i-1}) >= threshold.
  std::vector<std::unique_ptr<Session>> owned;
  for (int history : {0, 40, 300}) owned.push_back(Primed(history, history + 5));
  BatchDecoder decoder(*model_, {GetParam()});
  const int layers = model_->config().n_layers;
  int early = 0;
  for (float threshold : {0.6f, 0.8f, 0.9f, 0.95f}) {
    std::vector<DecodeRow> rows;
    std::vector<int> expected;
    std::vector<torch::Tensor> expected_logprobs;
    for (auto& s : owned) {
      const int token = s->text[s->next++];
      c10::InferenceMode guard;
      memory::SessionMemory clone = s->batched.Clone();
      std::vector<torch::Tensor> outputs;
      torch::Tensor ids = torch::tensor({static_cast<int64_t>(token)}).view({1, 1});
      model_->transformer()->forward(ids, clone, &outputs);
      torch::Tensor previous = model_->transformer()->Embed(ids);
      int exit = layers;
      for (int i = 0; i + 1 < layers; ++i) {
        const float cos = torch::cosine_similarity(outputs[i].view(-1), previous.view(-1), 0).item<float>();
        if (cos >= threshold) {
          exit = i + 1;
          break;
        }
        previous = outputs[i];
      }
      expected.push_back(exit);
      expected_logprobs.push_back(
          torch::log_softmax(model_->transformer()->Logits(outputs[exit - 1]).view(-1), -1));
      rows.push_back(
          DecodeRow{token, &s->batched, threshold, false, ExitMeasure::kHiddenSaturation});
    }
    auto out = decoder.Step(rows);
    ASSERT_TRUE(out.ok()) << out.status();
    for (size_t r = 0; r < rows.size(); ++r) {
      EXPECT_EQ(out->exit_layers[r], expected[r]) << "threshold " << threshold << " row " << r;
      EXPECT_LT(MaxDiff(out->logprobs[r], expected_logprobs[r]), 1e-4);
      early += expected[r] < layers;
    }
  }
  EXPECT_GT(early, 0) << "no threshold made any row exit early";
}

TEST_P(BatchDecoderTest, KnnLmKeysMatchForwardAndForceFullDepth) {
  std::vector<std::unique_ptr<Session>> owned;
  for (int history : {0, 60, 400}) owned.push_back(Primed(history, history + 9));
  BatchDecoder decoder(*model_, {GetParam()});
  std::vector<DecodeRow> rows;
  for (size_t r = 0; r < owned.size(); ++r) {
    // Row 1 asks for no key and exits at once; rows 0 and 2 ask, so they run to full depth.
    rows.push_back(DecodeRow{owned[r]->text[0], &owned[r]->batched, 0.0f, /*knn_lm_key=*/r != 1});
  }
  auto out = decoder.Step(rows);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE(out->knn_lm_keys.defined());
  ASSERT_EQ(out->knn_lm_keys.sizes(), (std::vector<int64_t>{3, model_->config().d_model}));
  EXPECT_EQ(out->exit_layers, (std::vector<int>{3, 1, 3}));
  for (size_t r : {0, 2}) {
    torch::Tensor keys;
    auto solo = model_->Forward({owned[r]->text[0]}, owned[r]->solo, Outputs::kLast, &keys);
    ASSERT_TRUE(solo.ok());
    EXPECT_LT(MaxDiff(out->knn_lm_keys[r], keys[0]), 1e-4) << "row " << r;
    EXPECT_LT(MaxDiff(out->logprobs[r], (*solo)[0]), 1e-4) << "row " << r;
  }
  EXPECT_EQ(out->knn_lm_keys[1].abs().max().item<float>(), 0.0f);
}

TEST_P(BatchDecoderTest, RejectsBadRowsWithoutTouchingMemory) {
  auto a = model_->NewMemory(), b = model_->NewMemory();
  ASSERT_TRUE(model_->Forward(RandomBytes(10, 1), a).ok());
  BatchDecoder decoder(*model_, {GetParam()});
  auto training = model_->transformer()->NewMemory(2, torch::kCPU);
  const std::vector<std::vector<DecodeRow>> bad = {
      {},
      {{65, &a}, {66, nullptr}},
      {{65, &a}, {66, &a}},
      {{65, &a}, {model_->config().vocab_size, &b}},
      {{65, &a}, {-1, &b}},
      {{65, &a}, {66, &training}},
  };
  for (const auto& rows : bad) {
    auto out = decoder.Step(rows);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << out.status();
  }
  EXPECT_EQ(a.next_position(), 10);
  EXPECT_EQ(b.next_position(), 0);
}

INSTANTIATE_TEST_SUITE_P(Layouts, BatchDecoderTest,
                         ::testing::Values(AttentionLayout::kPerRow, AttentionLayout::kPerRowOps),
                         [](const ::testing::TestParamInfo<AttentionLayout>& info) {
                           switch (info.param) {
                             case AttentionLayout::kPerRow: return std::string("PerRow");
                             case AttentionLayout::kPerRowOps: return std::string("PerRowOps");
                           }
                           return std::string("Unknown");
                         });

}  // namespace
}  // namespace mnemo::model
