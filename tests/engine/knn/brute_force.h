// Test helpers for KnnMemory: a brute-force reference that keeps every entry ever appended, and
// result comparisons.
#ifndef MNEMO_TESTS_ENGINE_KNN_BRUTE_FORCE_H_
#define MNEMO_TESTS_ENGINE_KNN_BRUTE_FORCE_H_

#include <torch/types.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include "engine/knn/knn_memory.h"
#include "gtest/gtest.h"

namespace mnemo::knn::testing {

// Every (key, value) appended, by position; searched with one matmul + topk per query.
class BruteForce {
 public:
  explicit BruteForce(int64_t first_position = 0) : first_(first_position) {}

  void Append(const torch::Tensor& keys, const torch::Tensor& values) {  // [n, H, d]
    chunks_k_.push_back(keys.clone());
    chunks_v_.push_back(values.clone());
    all_k_ = all_v_ = torch::Tensor();
  }

  const torch::Tensor& keys() {  // [n, H, d], row = position - first
    if (!all_k_.defined()) all_k_ = torch::cat(chunks_k_, 0);
    return all_k_;
  }

  const torch::Tensor& values() {
    if (!all_v_.defined()) all_v_ = torch::cat(chunks_v_, 0);
    return all_v_;
  }

  // Positions [H, Q, k] of the top-k in each query's window, best first, -1 padded.
  torch::Tensor Search(const torch::Tensor& queries, int k, const torch::Tensor& lo,
                       const torch::Tensor& hi) {
    const torch::Tensor& all = keys();
    const int64_t h = queries.size(0), q = queries.size(1), n = all.size(0);
    torch::Tensor out = torch::full({h, q, k}, -1, torch::kInt64);
    for (int64_t i = 0; i < q; ++i) {
      const int64_t a = std::max<int64_t>(lo[i].item<int64_t>() - first_, 0);
      const int64_t b = std::min<int64_t>(hi[i].item<int64_t>() - first_, n);
      if (a >= b) continue;
      // [H, m, d] x [H, d, 1] -> [H, m]
      torch::Tensor scores =
          torch::matmul(all.narrow(0, a, b - a).transpose(0, 1), queries.select(1, i).unsqueeze(-1))
              .squeeze(-1);
      const int64_t top = std::min<int64_t>(k, b - a);
      torch::Tensor idx = std::get<1>(scores.topk(top, 1));  // [H, top]
      out.select(1, i).narrow(1, 0, top).copy_(idx + a + first_);
    }
    return out;
  }

 private:
  int64_t first_;
  std::vector<torch::Tensor> chunks_k_, chunks_v_;
  torch::Tensor all_k_, all_v_;
};

// Unit vectors [rows, heads, d] drawn uniformly from the sphere.
inline torch::Tensor RandomUnit(torch::IntArrayRef shape) {
  torch::Tensor x = torch::randn(shape);
  return x / x.norm(2, -1, true);
}

// Fraction of the reference's hits (positions >= 0) that `found` also returned, per (head, query).
inline double Recall(const torch::Tensor& found, const torch::Tensor& reference) {
  const int64_t h = found.size(0), q = found.size(1);
  int64_t hit = 0, total = 0;
  auto f = found.accessor<int64_t, 3>();
  auto r = reference.accessor<int64_t, 3>();
  for (int64_t a = 0; a < h; ++a) {
    for (int64_t b = 0; b < q; ++b) {
      std::set<int64_t> mine;
      for (int64_t c = 0; c < found.size(2); ++c) mine.insert(f[a][b][c]);
      for (int64_t c = 0; c < reference.size(2); ++c) {
        if (r[a][b][c] < 0) continue;
        ++total;
        hit += mine.count(r[a][b][c]);
      }
    }
  }
  return total == 0 ? 1.0 : static_cast<double>(hit) / total;
}

// Every valid hit lies in its query's window; invalid hits are -1 with zero keys and values;
// keys/values are the appended ones; scores are the exact inner products, sorted descending.
inline void ExpectWellFormed(const KnnResult& r, const torch::Tensor& queries, const torch::Tensor& lo,
                             const torch::Tensor& hi, BruteForce& all, int64_t first_position) {
  const int64_t h = r.positions.size(0), q = r.positions.size(1), k = r.positions.size(2);
  ASSERT_EQ(r.keys.sizes(), torch::IntArrayRef({h, q, k, queries.size(2)}));
  ASSERT_EQ(r.values.sizes(), r.keys.sizes());
  ASSERT_EQ(r.scores.sizes(), r.positions.sizes());
  ASSERT_EQ(r.valid.sizes(), r.positions.sizes());
  const torch::Tensor& stored = all.keys();
  for (int64_t a = 0; a < h; ++a) {
    for (int64_t b = 0; b < q; ++b) {
      const int64_t l = lo[b].item<int64_t>(), u = hi[b].item<int64_t>();
      bool seen_invalid = false;
      float previous = 1e30f;
      for (int64_t c = 0; c < k; ++c) {
        const int64_t p = r.positions[a][b][c].item<int64_t>();
        const bool valid = r.valid[a][b][c].item<bool>();
        ASSERT_EQ(valid, p >= 0);
        if (!valid) {
          seen_invalid = true;
          EXPECT_EQ(r.keys[a][b][c].abs().sum().item<float>(), 0.0f);
          EXPECT_EQ(r.values[a][b][c].abs().sum().item<float>(), 0.0f);
          continue;
        }
        ASSERT_FALSE(seen_invalid) << "valid hit after an invalid one";
        ASSERT_GE(p, l) << "head " << a << " query " << b;
        ASSERT_LT(p, u) << "head " << a << " query " << b;
        ASSERT_TRUE(torch::equal(r.keys[a][b][c], stored[p - first_position][a]));
        ASSERT_TRUE(torch::equal(r.values[a][b][c], all.values()[p - first_position][a]));
        const float s = r.scores[a][b][c].item<float>();
        EXPECT_NEAR(s, (queries[a][b] * stored[p - first_position][a]).sum().item<float>(), 1e-5);
        EXPECT_LE(s, previous);
        previous = s;
      }
    }
  }
}

}  // namespace mnemo::knn::testing

#endif  // MNEMO_TESTS_ENGINE_KNN_BRUTE_FORCE_H_
