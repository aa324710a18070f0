// SessionMemory's rings at serving size: made zeroed in one huge-page region (Create), copied
// value for value into a region of their own (Clone), independent of the original.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "engine/memory/session_memory.h"
#include "engine/util/huge_pages.h"

namespace mnemo::memory {
namespace {

// The bundled model's memory (~7.7 MB of rings): far above the 1 MiB where regions start.
MemoryShape ServingShape(bool dense_knn) {
  MemoryShape s;
  s.layers = 6;
  s.heads = 4;
  s.d_head = 64;
  s.seg_len = 256;
  s.mem_len = 256;
  s.cmem_len = 128;
  s.cmem_rate = 4;
  s.max_distance = 1024;
  s.knn_layer = 3;
  s.knn_len = 2048;
  s.knn_store = !dense_knn;
  return s;
}

std::vector<const torch::Tensor*> Rings(const SessionMemory& memory) {
  std::vector<const torch::Tensor*> rings;
  for (int i = 0; i < memory.num_layers(); ++i) {
    for (const torch::Tensor* t : memory.layer(i).rings()) {
      if (t->defined()) rings.push_back(t);
    }
  }
  return rings;
}

uintptr_t Address(const torch::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); }

class SessionMemoryRingsTest : public ::testing::TestWithParam<bool> {};

TEST_P(SessionMemoryRingsTest, CreateMakesZeroedDisjointRingsInOneRegion) {
  SessionMemory memory = SessionMemory::Create(ServingShape(GetParam()), torch::kFloat32);
  std::vector<const torch::Tensor*> rings = Rings(memory);
  ASSERT_EQ(rings.size(), GetParam() ? 6u * 4 + 2 : 6u * 4);
  EXPECT_EQ(Address(*rings[0]) % util::kHugePageBytes, 0u) << "the region's first ring";
  uintptr_t end = 0;
  for (const torch::Tensor* ring : rings) {
    EXPECT_TRUE(ring->is_contiguous());
    EXPECT_EQ(ring->count_nonzero().item<int64_t>(), 0);
    EXPECT_GE(Address(*ring), end) << "rings follow each other without overlapping";
    end = Address(*ring) + ring->numel() * sizeof(float);
  }
  const knn::KnnMemory* store = memory.layer(3).knn_store();
  EXPECT_EQ(memory.bytes() - (store != nullptr ? store->bytes() : 0),
            [&] {
              int64_t total = 0;
              for (const torch::Tensor* ring : rings) total += ring->numel() * 4;
              return total;
            }());
}

TEST_P(SessionMemoryRingsTest, CloneCopiesEveryRingIntoItsOwnRegion) {
  SessionMemory memory = SessionMemory::Create(ServingShape(GetParam()), torch::kFloat32);
  torch::manual_seed(3);
  for (const torch::Tensor* ring : Rings(memory)) const_cast<torch::Tensor*>(ring)->normal_();
  SessionMemory copy = memory.Clone();
  std::vector<const torch::Tensor*> original = Rings(memory), copied = Rings(copy);
  ASSERT_EQ(copied.size(), original.size());
  EXPECT_EQ(Address(*copied[0]) % util::kHugePageBytes, 0u);
  for (size_t i = 0; i < original.size(); ++i) {
    EXPECT_TRUE(torch::equal(*copied[i], *original[i])) << "ring " << i;
    EXPECT_NE(copied[i]->data_ptr(), original[i]->data_ptr());
  }
  // Independent: writing the copy leaves the original as it was.
  const torch::Tensor before = original[0]->clone();
  const_cast<torch::Tensor*>(copied[0])->zero_();
  EXPECT_TRUE(torch::equal(*original[0], before));
}

TEST(SessionMemoryHalfRingsTest, AttentionRingsInFloat16HoldHalfTheBytes) {
  MemoryShape shape = ServingShape(/*dense_knn=*/false);
  SessionMemory full = SessionMemory::Create(shape, torch::kFloat32);
  shape.half_rings = true;
  SessionMemory half = SessionMemory::Create(shape, torch::kFloat32);
  for (int i = 0; i < half.num_layers(); ++i) {
    for (const torch::Tensor* ring : half.layer(i).rings()) {
      if (!ring->defined()) continue;
      EXPECT_EQ(ring->scalar_type(), torch::kFloat16) << "layer " << i;
      EXPECT_EQ(ring->to(torch::kFloat32).count_nonzero().item<int64_t>(), 0);
    }
  }
  EXPECT_EQ(Address(half.layer(0).k_raw()) % util::kHugePageBytes, 0u);
  const int64_t store = full.layer(3).knn_store()->bytes();
  EXPECT_EQ(half.layer(3).knn_store()->bytes(), store);
  EXPECT_EQ(half.bytes() - store, (full.bytes() - store) / 2);
}

TEST(SessionMemoryHalfRingsTest, CloneKeepsFloat16RingsValueForValue) {
  MemoryShape shape = ServingShape(/*dense_knn=*/true);  // float32 kNN rings beside float16 ones
  shape.half_rings = true;
  SessionMemory memory = SessionMemory::Create(shape, torch::kFloat32);
  torch::manual_seed(4);
  for (const torch::Tensor* ring : Rings(memory)) {
    const_cast<torch::Tensor*>(ring)->copy_(torch::randn(ring->sizes()));
  }
  EXPECT_EQ(memory.layer(3).k_knn().scalar_type(), torch::kFloat32);
  SessionMemory copy = memory.Clone();
  std::vector<const torch::Tensor*> original = Rings(memory), copied = Rings(copy);
  ASSERT_EQ(copied.size(), original.size());
  for (size_t i = 0; i < original.size(); ++i) {
    EXPECT_EQ(copied[i]->scalar_type(), original[i]->scalar_type()) << "ring " << i;
    EXPECT_TRUE(torch::equal(copied[i]->to(torch::kFloat32), original[i]->to(torch::kFloat32)))
        << "ring " << i;
    EXPECT_NE(copied[i]->data_ptr(), original[i]->data_ptr());
  }
}

TEST(SessionMemoryHalfRingsTest, Float16RingsAreForInferenceOnly) {
  MemoryShape shape = ServingShape(/*dense_knn=*/true);
  shape.half_rings = true;
  EXPECT_THROW(SessionMemory::Create(shape, torch::TensorOptions().requires_grad(true)),
               c10::Error);
}

INSTANTIATE_TEST_SUITE_P(Knn, SessionMemoryRingsTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "DenseRing" : "Store"; });

}  // namespace
}  // namespace mnemo::memory
