// Tiny random models for engine tests: fast enough that a test runs a few hundred positions in
// milliseconds. Tests start from TinyModelConfig() and set the memory they exercise.
#ifndef MNEMO_TESTS_ENGINE_TINY_MODEL_H_
#define MNEMO_TESTS_ENGINE_TINY_MODEL_H_

#include <torch/types.h>

#include <cstdint>
#include <random>
#include <vector>

#include "engine/model/model_config.h"

namespace mnemo::testing {

// 2 layers, d_model 32, 2 heads of 16, d_ff 64; memory fields left at their defaults.
inline model::ModelConfig TinyModelConfig() {
  model::ModelConfig c;
  c.n_layers = 2;
  c.d_model = 32;
  c.n_heads = 2;
  c.d_head = 16;
  c.d_ff = 64;
  return c;
}

// TinyModelConfig with every kind of memory, small enough that a few hundred positions fill and
// wrap them all: 3 layers, segments and raw window of 16, 4 compressed slots of 4 positions
// each, and layer 1 retrieving its top 4 among 32 older positions.
inline model::ModelConfig TinyMemoryModelConfig(
    model::Compression compression = model::Compression::kMean) {
  model::ModelConfig c = TinyModelConfig();
  c.n_layers = 3;
  c.seg_len = 16;
  c.mem_len = 16;
  c.cmem_len = 4;
  c.cmem_rate = 4;
  c.compression = compression;
  c.knn_layer = 1;
  c.knn_topk = 4;
  c.knn_mem_len = 32;
  return c;
}

// Largest absolute elementwise difference.
inline float MaxDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<float>();
}

// BOS then n - 1 uniformly random bytes. No two positions share a key, so kNN retrieval has no
// near-ties whose order could flip with float rounding.
inline std::vector<int> RandomBytes(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> tokens = {model::kBosId};
  while (static_cast<int>(tokens.size()) < n) tokens.push_back(static_cast<int>(rng() % 256));
  return tokens;
}

}  // namespace mnemo::testing

#endif  // MNEMO_TESTS_ENGINE_TINY_MODEL_H_
