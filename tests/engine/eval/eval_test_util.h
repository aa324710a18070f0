// Shared fixtures of the mnemo_eval tests: a tiny random model with every memory kind, and
// deterministic code-like text.
#ifndef MNEMO_TESTS_ENGINE_EVAL_EVAL_TEST_UTIL_H_
#define MNEMO_TESTS_ENGINE_EVAL_EVAL_TEST_UTIL_H_

#include <memory>
#include <random>
#include <string>

#include "engine/model/model.h"
#include "tests/engine/tiny_model.h"

namespace mnemo::eval::testing {

// 2 layers, d 32, seg_len 16, mem_len 12, compressed memory and a kNN layer: small enough
// that a few KB of text runs in well under a second.
inline model::ModelConfig TinyConfig() {
  model::ModelConfig c = ::mnemo::testing::TinyModelConfig();
  c.seg_len = 16;
  c.mem_len = 12;
  c.cmem_len = 6;
  c.cmem_rate = 3;
  c.clamp_len = 64;
  c.knn_layer = 1;
  c.knn_topk = 4;
  c.knn_mem_len = 64;
  return c;
}

inline std::unique_ptr<model::Model> TinyModel(uint64_t seed = 7) {
  return model::Model::Random(TinyConfig(), seed);
}

// `n` bytes of Python-looking text, deterministic in `seed`.
inline std::string CodeText(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::string words[] = {"def f(x):\n", "    return x\n", "import os\n", "x = 1\n",
                               "class A:\n", "    pass\n",     "# memory\n"};
  std::string text;
  while (text.size() < n) text += words[rng() % 7];
  text.resize(n);
  return text;
}

}  // namespace mnemo::eval::testing

#endif  // MNEMO_TESTS_ENGINE_EVAL_EVAL_TEST_UTIL_H_
