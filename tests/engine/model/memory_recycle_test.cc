// SessionMemory::Clear and memory::MemoryPool (which Model::NewMemory draws from): a memory
// emptied after use equals a fresh one bit for bit (every buffer, every count), whatever it saw
// — a long text with compressed and kNN memory, a short one, a write never committed (a step
// that failed halfway) — and a recycled memory gives the same log-probs as a fresh one.
// NewMemory hands recycled memories out only for the same options, and the pool keeps at most
// its capacity.
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/model.h"
#include "tests/engine/tiny_model.h"

namespace mnemo::model {
namespace {

std::vector<int> Text(int n) {
  std::vector<int> tokens = {kBosId};
  const std::string text = "def memory(x):\n    return x * 2  # tensor\n";
  while (static_cast<int>(tokens.size()) < n) {
    for (char ch : text) tokens.push_back(static_cast<unsigned char>(ch));
  }
  tokens.resize(n);
  return tokens;
}

// Every buffer of `a` equals `b`'s bit for bit, and so do the counts a reader sees.
void ExpectSameAsFresh(const memory::SessionMemory& a, const memory::SessionMemory& b) {
  ASSERT_EQ(a.num_layers(), b.num_layers());
  EXPECT_EQ(a.next_position(), b.next_position());
  EXPECT_EQ(a.xl_tokens(), b.xl_tokens());
  EXPECT_EQ(a.compressed_slots(), b.compressed_slots());
  EXPECT_EQ(a.knn_entries(), b.knn_entries());
  EXPECT_EQ(a.bytes(), b.bytes());
  for (int i = 0; i < a.num_layers(); ++i) {
    const memory::LayerMemory& x = a.layer(i);
    const memory::LayerMemory& y = b.layer(i);
    for (auto [p, q] : {std::pair{&x.k_raw(), &y.k_raw()}, {&x.v_raw(), &y.v_raw()},
                        {&x.k_cmp(), &y.k_cmp()}, {&x.v_cmp(), &y.v_cmp()}}) {
      ASSERT_EQ(p->defined(), q->defined()) << "layer " << i;
      if (p->defined()) {
        ASSERT_EQ(p->scalar_type(), q->scalar_type()) << "layer " << i;
        EXPECT_TRUE(torch::equal(*p, *q)) << "layer " << i;
      }
    }
    ASSERT_EQ(x.knn_store() != nullptr, y.knn_store() != nullptr) << "layer " << i;
    if (x.knn_store() != nullptr) {
      EXPECT_EQ(x.knn_store()->next_position(), y.knn_store()->next_position()) << "layer " << i;
      EXPECT_EQ(x.knn_store()->bytes(), y.knn_store()->bytes()) << "layer " << i;
    }
  }
}

class MemoryRecycleTest : public ::testing::Test {
 protected:
  std::unique_ptr<Model> model_ =
      Model::Random(::mnemo::testing::TinyMemoryModelConfig(Compression::kConv), /*seed=*/17);
  memory::MemoryPool pool_;
};

TEST_F(MemoryRecycleTest, ClearedMemoryEqualsAFreshOne) {
  MemoryOptions half;
  half.half_rings = true;
  for (const MemoryOptions& options : {MemoryOptions{}, half}) {  // float32 and float16 rings
    for (int length : {1, 7, 30, 200}) {  // within the raw window, past it, many times round
      const std::string what =
          "length " + std::to_string(length) + (options.half_rings ? ", float16" : "");
      memory::SessionMemory used = model_->NewMemory(options);
      const std::vector<int> text = Text(length);
      ASSERT_TRUE(model_->Forward(text, used).ok());
      if (length == 200) {
        ASSERT_GT(used.compressed_slots(), 0);
      }
      used.Clear();
      SCOPED_TRACE(what);
      ExpectSameAsFresh(used, model_->NewMemory(options));
      // And it behaves as one: the same text gives the same log-probs, bit for bit.
      memory::SessionMemory fresh = model_->NewMemory(options);
      auto again = model_->Forward(text, used);
      auto first = model_->Forward(text, fresh);
      ASSERT_TRUE(again.ok() && first.ok());
      EXPECT_TRUE(torch::equal(*again, *first)) << what;
    }
  }
}

TEST_F(MemoryRecycleTest, ClearZeroesAPlanThatWasWrittenButNeverCommitted) {
  memory::SessionMemory used = model_->NewMemory();
  ASSERT_TRUE(model_->Forward(Text(5), used).ok());
  // A step that wrote its slots and then failed: the write is abandoned, never committed.
  const int64_t before = used.next_position();
  {
    c10::InferenceMode inference;
    memory::SegmentWrite write = used.BeginWrite(4);
    const memory::MemoryShape& s = used.shape();
    for (int i = 0; i < used.num_layers(); ++i) {
      write.layer(i).WriteRaw(torch::full({1, s.heads, 4, s.d_head}, 7.0f),
                              torch::full({1, s.heads, 4, s.d_head}, std::nanf("")));
    }
    write.Abandon();
  }
  EXPECT_EQ(used.next_position(), before);  // the abandoned write left it
  used.Clear();
  ExpectSameAsFresh(used, model_->NewMemory());
}

TEST_F(MemoryRecycleTest, NewMemoryHandsOutRecycledMemoriesOfTheSameOptionsOnly) {
  MemoryOptions plain, no_knn;
  no_knn.knn = false;
  memory::SessionMemory used = model_->NewMemory(plain);
  ASSERT_TRUE(model_->Forward(Text(40), used).ok());
  const void* buffer = used.layer(0).k_raw().data_ptr();
  pool_.Give(std::move(used));
  // Other options get a new memory; the same options get the recycled one, emptied.
  memory::SessionMemory other = model_->NewMemory(no_knn, &pool_);
  EXPECT_NE(other.layer(0).k_raw().data_ptr(), buffer);
  EXPECT_EQ(other.layer(model_->config().knn_layer).knn_store(), nullptr);
  memory::SessionMemory reused = model_->NewMemory(plain, &pool_);
  EXPECT_EQ(reused.layer(0).k_raw().data_ptr(), buffer);
  ExpectSameAsFresh(reused, model_->NewMemory(plain));
  // A placeholder (a request that never made its memory) is ignored.
  pool_.Give(memory::SessionMemory());
  EXPECT_NE(model_->NewMemory(plain, &pool_).layer(0).k_raw().data_ptr(), buffer);
}

TEST_F(MemoryRecycleTest, KeepsAtMostItsCapacity) {
  std::vector<memory::SessionMemory> used;
  for (int i = 0; i < memory::MemoryPool::kDefaultCapacity + 3; ++i) {
    used.push_back(model_->NewMemory());
    ASSERT_TRUE(model_->Forward(Text(3), used.back()).ok());
  }
  for (memory::SessionMemory& m : used) pool_.Give(std::move(m));
  EXPECT_EQ(pool_.size(), memory::MemoryPool::kDefaultCapacity);
  memory::SessionMemory taken = model_->NewMemory({}, &pool_);
  EXPECT_EQ(pool_.size(), memory::MemoryPool::kDefaultCapacity - 1);
}

TEST_F(MemoryRecycleTest, DropsATornMemory) {
  // A write abandoned after its kNN store append leaves the memory torn; the pool drops it.
  memory::SessionMemory used = model_->NewMemory();
  ASSERT_TRUE(model_->Forward(Text(3), used).ok());
  const int knn_layer = model_->config().knn_layer;
  ASSERT_NE(used.layer(knn_layer).knn_store(), nullptr);
  const memory::MemoryShape& s = used.shape();
  {
    c10::InferenceMode inference;
    memory::SegmentWrite write = used.BeginWrite(1);
    write.layer(knn_layer).AppendKnn(torch::zeros({1, s.heads, 1, s.d_head}),
                                     torch::zeros({1, s.heads, 1, s.d_head}));
  }  // abandoned
  EXPECT_TRUE(used.torn());
  memory::SessionMemory copy = used.Clone();
  pool_.Give(std::move(used));
  EXPECT_EQ(pool_.size(), 0);
  // Clear mends it.
  copy.Clear();
  EXPECT_FALSE(copy.torn());
  ExpectSameAsFresh(copy, model_->NewMemory());
}

}  // namespace
}  // namespace mnemo::model
