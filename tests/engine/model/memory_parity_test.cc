// The central correctness test of the engine (docs/design.md §2): a text processed in one call,
// in many calls, segment by segment or token by token gives the same log-probabilities, with
// and without compressive memory; and it matches an independent, naive per-position
// implementation of the same definition (no ring buffers, no segment plans).
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "tests/engine/tiny_model.h"

namespace mnemo::model {
namespace {

using ::mnemo::testing::RandomBytes;

ModelConfig SmallConfig(int cmem_len, Compression compression, int knn_len = 0) {
  ModelConfig c = ::mnemo::testing::TinyModelConfig();
  c.seg_len = 16;
  c.mem_len = 12;
  c.cmem_len = cmem_len;
  c.cmem_rate = 3;
  c.compression = compression;
  c.clamp_len = 40;  // smaller than the farthest slot, so clamping is exercised too
  c.knn_layer = knn_len > 0 ? 1 : -1;
  c.knn_topk = 4;
  c.knn_mem_len = knn_len;
  return c;
}

std::vector<int> Text(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> tokens = {kBosId};
  const std::string words[] = {"memory ", "tensor ", "def ", "return ", "x = 1\n", "import "};
  while (static_cast<int>(tokens.size()) < n) {
    for (char ch : words[rng() % 6]) tokens.push_back(static_cast<unsigned char>(ch));
  }
  tokens.resize(n);
  return tokens;
}

// Feeds `tokens` in pieces of the given sizes (cycled); returns [n, vocab] log-probs.
torch::Tensor FeedInPieces(Model& model, memory::SessionMemory& memory,
                           const std::vector<int>& tokens, const std::vector<int>& sizes) {
  std::vector<torch::Tensor> parts;
  size_t pos = 0, i = 0;
  while (pos < tokens.size()) {
    const size_t n = std::min<size_t>(sizes[i++ % sizes.size()], tokens.size() - pos);
    auto out = model.Forward(absl::MakeConstSpan(tokens).subspan(pos, n), memory);
    EXPECT_TRUE(out.ok()) << out.status();
    parts.push_back(*out);
    pos += n;
  }
  return torch::cat(parts, 0);
}

// Independent implementation: every query's keys are listed explicitly, one query at a time.
torch::Tensor NaiveReference(Model& model, const std::vector<int>& tokens) {
  c10::InferenceMode guard;
  const ModelConfig& c = model.config();
  auto params = model.transformer()->named_parameters();
  auto P = [&](const std::string& name) { return params[name]; };
  const int64_t n = tokens.size(), H = c.n_heads, dh = c.d_head, D = c.MaxDistance();
  auto layer_norm = [&](torch::Tensor x, const std::string& prefix) {
    return torch::layer_norm(x, {c.d_model}, P(prefix + ".weight"), P(prefix + ".bias"),
                             c.layer_norm_eps);
  };
  // Sinusoid of distances 0..D.
  torch::Tensor R = torch::zeros({D + 1, c.d_model});
  for (int64_t d = 0; d <= D; ++d) {
    for (int64_t i = 0; i < c.d_model / 2; ++i) {
      const double f = std::pow(10000.0, -2.0 * i / c.d_model);
      R[d][i] = std::sin(d * f);
      R[d][i + c.d_model / 2] = std::cos(d * f);
    }
  }
  std::vector<int64_t> ids(tokens.begin(), tokens.end());
  torch::Tensor h = P("embedding.weight").index_select(0, torch::tensor(ids));  // [n, d]
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    torch::Tensor x = layer_norm(h, b + "ln1");
    torch::Tensor qkv = torch::matmul(x, P(b + "attn.qkv.weight").t()).view({n, 3, H, dh});
    torch::Tensor q = qkv.select(1, 0), k = qkv.select(1, 1), v = qkv.select(1, 2);  // [n, H, dh]
    torch::Tensor r = torch::matmul(R, P(b + "attn.r_net.weight").t()).view({D + 1, H, dh});
    torch::Tensor u = P(b + "attn.u_bias"), vb = P(b + "attn.v_bias");  // [H, dh]
    // Compressed groups g = 0.. of positions [g*rate, (g+1)*rate).
    const int64_t groups = c.cmem_len > 0 ? n / c.cmem_rate : 0;
    std::vector<torch::Tensor> ck, cv;
    for (int64_t g = 0; g < groups; ++g) {
      torch::Tensor kg = k.narrow(0, g * c.cmem_rate, c.cmem_rate);  // [rate, H, dh]
      torch::Tensor vg = v.narrow(0, g * c.cmem_rate, c.cmem_rate);
      if (c.compression == Compression::kMean) {
        ck.push_back(kg.mean(0));
        cv.push_back(vg.mean(0));
      } else if (c.compression == Compression::kMax) {
        ck.push_back(std::get<0>(kg.max(0)));
        cv.push_back(std::get<0>(vg.max(0)));
      } else {
        // Conv1d, kernel = stride = rate: out[o] = bias[o] + sum_{i,j} W[o, i, j] * in[i, j]
        auto conv = [&](torch::Tensor grp, const std::string& name) {
          torch::Tensor in = grp.reshape({c.cmem_rate, H * dh}).t();  // [H*dh, rate]
          torch::Tensor w = P(b + "attn." + name + ".weight");         // [H*dh, H*dh, rate]
          return (torch::einsum("oij,ij->o", {w, in}) + P(b + "attn." + name + ".bias"))
              .view({H, dh});
        };
        ck.push_back(conv(kg, "compress_k"));
        cv.push_back(conv(vg, "compress_v"));
      }
    }
    torch::Tensor y = torch::zeros({n, H, dh});
    for (int64_t t = 0; t < n; ++t) {
      std::vector<torch::Tensor> keys, values;
      std::vector<int64_t> dist;
      for (int64_t p = std::max<int64_t>(0, t - c.mem_len); p <= t; ++p) {
        keys.push_back(k[p]);
        values.push_back(v[p]);
        dist.push_back(std::min<int64_t>(t - p, D));
      }
      const int64_t horizon = t - c.mem_len;
      for (int64_t g = 0; g < groups; ++g) {
        if ((g + 1) * c.cmem_rate <= horizon && g >= horizon / c.cmem_rate - c.cmem_len) {
          keys.push_back(ck[g]);
          values.push_back(cv[g]);
          dist.push_back(std::min<int64_t>(t - ((g + 1) * c.cmem_rate - 1), D));
        }
      }
      torch::Tensor K = torch::stack(keys, 1), V = torch::stack(values, 1);  // [H, m, dh]
      torch::Tensor Rk = r.index_select(0, torch::tensor(dist)).permute({1, 0, 2});  // [H, m, dh]
      torch::Tensor qt = q[t];  // [H, dh]
      torch::Tensor scores = (torch::einsum("hd,hmd->hm", {qt + u, K}) +
                              torch::einsum("hd,hmd->hm", {qt + vb, Rk})) /
                             std::sqrt(static_cast<double>(dh));
      y[t] = torch::einsum("hm,hmd->hd", {torch::softmax(scores, 1), V});
      // kNN layer: top-k cosine matches among [t - mem_len - knn_mem_len, t - mem_len).
      const int64_t lo = std::max<int64_t>(0, t - c.mem_len - c.knn_mem_len), hi = t - c.mem_len;
      if (l == c.knn_layer && c.knn_mem_len > 0 && hi > lo) {
        torch::Tensor qn = qt / qt.norm(2, -1, true).clamp_min(1e-6);  // [H, dh]
        torch::Tensor kc = k.narrow(0, lo, hi - lo), vc = v.narrow(0, lo, hi - lo);  // [P, H, dh]
        torch::Tensor kn = kc / kc.norm(2, -1, true).clamp_min(1e-6);
        torch::Tensor sims = torch::einsum("hd,phd->hp", {qn, kn});  // [H, P]
        auto top = sims.topk(std::min<int64_t>(c.knn_topk, hi - lo), 1);
        torch::Tensor probs = torch::softmax(std::get<0>(top) * P(b + "attn.knn_scale").unsqueeze(1), 1);
        for (int64_t head = 0; head < H; ++head) {
          torch::Tensor hits = vc.select(1, head).index_select(0, std::get<1>(top)[head]);  // [k, dh]
          torch::Tensor y_knn = torch::matmul(probs[head], hits);
          torch::Tensor g = torch::sigmoid(P(b + "attn.knn_gate")[head]);
          y[t][head] = (1 - g) * y[t][head] + g * y_knn;
        }
      }
    }
    h = h + torch::matmul(y.reshape({n, H * dh}), P(b + "attn.out.weight").t());
    torch::Tensor f = torch::gelu(torch::matmul(layer_norm(h, b + "ln2"), P(b + "ff1.weight").t()) +
                                  P(b + "ff1.bias"));
    h = h + torch::matmul(f, P(b + "ff2.weight").t()) + P(b + "ff2.bias");
  }
  torch::Tensor logits = torch::matmul(layer_norm(h, "final_norm"), P("embedding.weight").t());
  return torch::log_softmax(logits, -1);
}

struct ParityCase {
  const char* name;
  int cmem_len;
  Compression compression;
  int knn_len = 0;
};
void PrintTo(const ParityCase& c, std::ostream* os) { *os << c.name; }

class MemoryParityTest : public ::testing::TestWithParam<ParityCase> {
 protected:
  void SetUp() override {
    model_ = Model::Random(
        SmallConfig(GetParam().cmem_len, GetParam().compression, GetParam().knn_len), 11);
    // Long enough to fill the raw window, overflow the compressed and kNN memories and wrap
    // every ring.
    tokens_ = GetParam().knn_len > 0 ? RandomBytes(160, 3) : Text(160, 3);
    auto memory = model_->NewMemory();
    full_ = FeedInPieces(*model_, memory, tokens_, {static_cast<int>(tokens_.size())});
  }

  std::unique_ptr<Model> model_;
  std::vector<int> tokens_;
  torch::Tensor full_;  // one call: [n, vocab]
};

TEST_P(MemoryParityTest, MatchesNaivePerPositionReference) {
  torch::Tensor reference = NaiveReference(*model_, tokens_);
  EXPECT_LT((full_ - reference).abs().max().item<float>(), 1e-4);
}

TEST_P(MemoryParityTest, SplitCallsMatchOneCall) {
  for (const std::vector<int>& sizes :
       {std::vector<int>{1}, {5}, {16}, {17, 3}, {40, 1, 2, 29}, {7, 16, 9}}) {
    auto memory = model_->NewMemory();
    torch::Tensor pieces = FeedInPieces(*model_, memory, tokens_, sizes);
    EXPECT_LT((pieces - full_).abs().max().item<float>(), 1e-4) << "piece sizes " << sizes[0];
    EXPECT_EQ(memory.next_position(), static_cast<int64_t>(tokens_.size()));
  }
}

// Inference attends over a segment on the host (RelativeAttention::PrefillAttendHost); with
// autograd on (training) the same layers run LibTorch ops: the two give the same log-probs.
TEST_P(MemoryParityTest, AutogradPathMatchesInferencePath) {
  torch::AutoGradMode grad(true);
  const ModelConfig& c = model_->config();
  memory::SessionMemory memory = model_->transformer()->NewMemory(
      1, torch::kCPU, /*compressive=*/c.cmem_len > 0, /*knn_mem_len=*/-1, /*knn_store=*/true);
  std::vector<torch::Tensor> parts;
  for (size_t pos = 0; pos < tokens_.size(); pos += c.seg_len) {
    const int64_t n = std::min<int64_t>(c.seg_len, static_cast<int64_t>(tokens_.size() - pos));
    std::vector<int64_t> ids(tokens_.begin() + pos, tokens_.begin() + pos + n);
    torch::Tensor hidden = model_->transformer()->forward(torch::tensor(ids).view({1, n}), memory);
    parts.push_back(torch::log_softmax(model_->transformer()->Logits(hidden), -1)[0].detach());
  }
  EXPECT_LT((torch::cat(parts, 0) - full_).abs().max().item<float>(), 1e-4);
}

TEST_P(MemoryParityTest, LastOutputEqualsLastRowOfAll) {
  auto memory = model_->NewMemory();
  auto last = model_->Forward(tokens_, memory, Outputs::kLast);
  ASSERT_TRUE(last.ok());
  ASSERT_EQ(last->size(0), 1);
  EXPECT_LT(((*last)[0] - full_[-1]).abs().max().item<float>(), 1e-5);
}

TEST_P(MemoryParityTest, MemoryChangesWhatFollows) {
  // The same text scores differently after another text than in a fresh session.
  std::vector<int> second = Text(40, 9);
  second[0] = 'Q';
  auto fresh = model_->NewMemory();
  std::vector<int> bos = {kBosId};
  ASSERT_TRUE(model_->Forward(bos, fresh).ok());
  torch::Tensor alone = *model_->Forward(second, fresh);
  auto used = model_->NewMemory();
  ASSERT_TRUE(model_->Forward(tokens_, used).ok());
  torch::Tensor after = *model_->Forward(second, used);
  EXPECT_GT((alone - after).abs().max().item<float>(), 1e-3);
}

TEST_P(MemoryParityTest, CloneIsIndependent) {
  auto memory = model_->NewMemory();
  std::vector<int> head(tokens_.begin(), tokens_.begin() + 100);
  std::vector<int> tail(tokens_.begin() + 100, tokens_.end());
  ASSERT_TRUE(model_->Forward(head, memory).ok());
  memory::SessionMemory copy = memory.Clone();
  torch::Tensor a = *model_->Forward(tail, memory);
  torch::Tensor b = *model_->Forward(tail, copy);
  EXPECT_TRUE(torch::equal(a, b));
  EXPECT_LT((a - full_.narrow(0, 100, tail.size())).abs().max().item<float>(), 1e-4);
}

TEST_P(MemoryParityTest, KnnLmKeysDoNotDependOnSplits) {
  // The kNN-LM key of a position (last layer's normalised FFN input) is defined per position,
  // like the log-probs: one call and token-sized pieces give the same keys.
  auto whole_memory = model_->NewMemory();
  torch::Tensor whole_keys;
  ASSERT_TRUE(model_->Forward(tokens_, whole_memory, Outputs::kAll, &whole_keys).ok());
  ASSERT_EQ(whole_keys.sizes(), (std::vector<int64_t>{static_cast<int64_t>(tokens_.size()),
                                                     model_->config().d_model}));
  auto memory = model_->NewMemory();
  std::vector<torch::Tensor> parts;
  for (size_t pos = 0; pos < tokens_.size(); pos += 9) {
    const size_t n = std::min<size_t>(9, tokens_.size() - pos);
    torch::Tensor keys;
    ASSERT_TRUE(model_->Forward(absl::MakeConstSpan(tokens_).subspan(pos, n), memory,
                                Outputs::kAll, &keys).ok());
    parts.push_back(keys);
  }
  EXPECT_LT((torch::cat(parts, 0) - whole_keys).abs().max().item<float>(), 1e-4);
  // Keys are finite and not constant.
  EXPECT_TRUE(torch::isfinite(whole_keys).all().item<bool>());
  EXPECT_GT(whole_keys.std().item<float>(), 1e-3);
}

// The same fixture, for the cases with a kNN layer only.
using KnnStoreTest = MemoryParityTest;

TEST_P(KnnStoreTest, MatchesTrainingRing) {
  // Inference keeps the kNN entries in a knn::KnnMemory, training in a dense ring searched by
  // mask: the two must give the same log-probabilities.
  memory::SessionMemory ring = model_->transformer()->NewMemory(
      1, torch::kCPU, /*compressive=*/GetParam().cmem_len > 0, /*knn_mem_len=*/-1,
      /*knn_store=*/false);
  ASSERT_EQ(ring.layer(model_->config().knn_layer).knn_store(), nullptr);
  torch::Tensor via_ring = FeedInPieces(*model_, ring, tokens_, {7, 16, 9});
  EXPECT_LT((via_ring - full_).abs().max().item<float>(), 1e-4);
}

TEST_P(KnnStoreTest, PastItsExactThresholdStaysClose) {
  // Past knn_exact_threshold the store searches a FAISS IVF index: approximate, so close to
  // the exact result rather than equal, and still independent of how the text is split.
  MemoryOptions options;
  options.knn_exact_threshold = 16;
  auto memory = model_->NewMemory(options);
  torch::Tensor approximate = FeedInPieces(*model_, memory, tokens_, {5});
  const int layer = model_->config().knn_layer;
  ASSERT_NE(memory.layer(layer).knn_store(), nullptr);
  EXPECT_EQ(memory.layer(layer).knn_store()->mode(), knn::KnnMode::kIvf);
  const float mean_diff = (approximate - full_).abs().mean().item<float>();
  EXPECT_LT(mean_diff, 0.05) << "IVF kNN drifted from exact kNN";
}

// Groups are compressed late (once their first position leaves the raw window) and in batches
// (segment_plan.h): decoding one position at a time, nothing is compressed before anything
// could be seen, every group a query may see is formed in time, only complete groups are
// formed, and there are fewer compression passes than groups. (That results do not depend on
// when groups form is what the other tests here check.)
TEST_P(MemoryParityTest, CompressionIsLateAndBatched) {
  const ModelConfig& c = model_->config();
  if (c.cmem_len == 0) GTEST_SKIP() << "no compressed memory";
  memory::SessionMemory memory = model_->NewMemory();
  int64_t formed = 0, passes = 0;
  for (int64_t end = 1; end <= 400; ++end) {
    memory::SegmentWrite write = memory.BeginWrite(1);
    const memory::SegmentPlan& plan = write.plan();
    if (end <= c.mem_len) {
      EXPECT_EQ(plan.new_groups, 0) << "at position " << end - 1;
    }
    formed += plan.new_groups;
    passes += plan.new_groups > 0;
    const int64_t needed = std::max<int64_t>(0, (end - 1 - c.mem_len) / c.cmem_rate);
    EXPECT_GE(formed, needed) << "at position " << end - 1;
    EXPECT_LE(formed * c.cmem_rate, end) << "at position " << end - 1;
    EXPECT_EQ(plan.cmp_filled_after, std::min<int64_t>(formed, memory.shape().cmp_capacity()));
    write.Commit();
  }
  EXPECT_GT(formed, 100);
  EXPECT_LT(passes * 2, formed) << passes << " passes for " << formed << " groups";
}

TEST_P(MemoryParityTest, MemoryStatsFollowTheDefinition) {
  const ModelConfig& c = model_->config();
  auto memory = model_->NewMemory();
  EXPECT_EQ(memory.xl_tokens(), 0);
  ASSERT_TRUE(model_->Forward(tokens_, memory).ok());
  EXPECT_EQ(memory.xl_tokens(), c.mem_len);
  const int64_t formed = (static_cast<int64_t>(tokens_.size()) - c.mem_len) / c.cmem_rate;
  EXPECT_EQ(memory.compressed_slots(), std::min<int64_t>(formed, c.cmem_len));
  const int64_t raw_bytes = int64_t{2} * c.n_heads * (c.mem_len + c.seg_len) * c.d_head * 4;
  EXPECT_GE(memory.bytes(), c.n_layers * raw_bytes);
  // Appending never grows the buffers.
  const int64_t before = memory.bytes();
  std::vector<int> more = Text(50, 4);
  ASSERT_TRUE(model_->Forward(more, memory).ok());
  EXPECT_EQ(memory.bytes(), before);
}

INSTANTIATE_TEST_SUITE_P(
    Memories, MemoryParityTest,
    ::testing::Values(ParityCase{"XlOnly", 0, Compression::kMean},
                      ParityCase{"CompressiveMean", 5, Compression::kMean},
                      ParityCase{"CompressiveMax", 5, Compression::kMax},
                      ParityCase{"CompressiveConv", 5, Compression::kConv},
                      ParityCase{"XlKnn", 0, Compression::kMean, 30},
                      ParityCase{"CompressiveConvKnn", 5, Compression::kConv, 30}),
    [](const ::testing::TestParamInfo<ParityCase>& info) { return std::string(info.param.name); });

INSTANTIATE_TEST_SUITE_P(
    Memories, KnnStoreTest,
    ::testing::Values(ParityCase{"XlKnn", 0, Compression::kMean, 30},
                      ParityCase{"CompressiveConvKnn", 5, Compression::kConv, 30}),
    [](const ::testing::TestParamInfo<ParityCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace mnemo::model
