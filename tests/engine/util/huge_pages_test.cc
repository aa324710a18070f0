// ZerosInHugePages / MoveToHugePages: the tensors are ordinary (zeroed, contiguous, disjoint,
// aligned), their region lives exactly as long as the last of them, and the kernel backs it
// with huge pages where it gives them to advised regions.
#include "engine/util/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace mnemo::util {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

uintptr_t Address(const torch::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); }

TEST(ZerosInHugePagesTest, ZeroedContiguousDisjointAndAligned) {
  // 3 x 1 MiB + an odd size: one region of 4 MiB.
  const std::vector<std::vector<int64_t>> shapes = {{1, 4, 512, 128}, {1, 4, 512, 128},
                                                    {7, 3}, {1, 4, 512, 128}};
  std::vector<torch::Tensor> tensors = ZerosInHugePages(shapes);
  ASSERT_EQ(tensors.size(), shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    EXPECT_EQ(tensors[i].sizes().vec(), shapes[i]);
    EXPECT_EQ(tensors[i].scalar_type(), torch::kFloat32);
    EXPECT_TRUE(tensors[i].is_contiguous());
    EXPECT_EQ(Address(tensors[i]) % 64, 0u) << i;
    EXPECT_EQ(tensors[i].count_nonzero().item<int64_t>(), 0) << i;
  }
  // Writing each tensor whole leaves the others as they were: no two overlap.
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].fill_(static_cast<float>(i + 1));
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_TRUE(tensors[i].eq(static_cast<float>(i + 1)).all().item<bool>()) << i;
  }
  // One region, starting on a huge-page boundary.
  EXPECT_EQ(Address(tensors[0]) % kHugePageBytes, 0u);
  EXPECT_LT(Address(tensors[3]) - Address(tensors[0]), static_cast<uintptr_t>(4 * kMiB));
}

TEST(ZerosInHugePagesTest, RegionLivesAsLongAsItsLastTensor) {
  std::vector<torch::Tensor> tensors = ZerosInHugePages({{2 * kMiB / 4}, {kMiB / 4}});
  const void* start = tensors[0].data_ptr();
  ASSERT_GE(HugePageBytesInMapping(start), 0) << "the region should be mapped";
  torch::Tensor survivor = tensors[1];
  tensors.clear();
  survivor.fill_(3.0f);  // still mapped: the survivor holds the region
  EXPECT_GE(HugePageBytesInMapping(start), 0);
  EXPECT_TRUE(survivor.eq(3.0f).all().item<bool>());
  survivor = torch::Tensor();
  EXPECT_EQ(HugePageBytesInMapping(start), -1) << "the region should be unmapped";
}

// A /proc/vmstat counter, or -1.
int64_t VmStat(const std::string& name) {
  std::ifstream stat("/proc/vmstat");
  std::string key;
  int64_t value = 0;
  while (stat >> key >> value) {
    if (key == name) return value;
  }
  return -1;
}

TEST(ZerosInHugePagesTest, BackedByHugePagesWhereTheKernelGivesThem) {
  if (!HugePagesEnabled()) GTEST_SKIP() << "transparent huge pages are off on this machine";
  const int64_t fallbacks = VmStat("thp_fault_fallback");
  std::vector<torch::Tensor> tensors = ZerosInHugePages({{8 * kMiB / 4}});
  tensors[0].fill_(1.0f);  // huge pages are allocated on first touch
  const int64_t bytes = HugePageBytesInMapping(tensors[0].data_ptr());
  if (bytes == 0 && fallbacks >= 0 && VmStat("thp_fault_fallback") > fallbacks) {
    // The kernel tried (the region was advised) but had no free huge page: not ours to test.
    GTEST_SKIP() << "the kernel found no free huge page (thp_fault_fallback rose)";
  }
  EXPECT_GT(bytes, 0);
}

TEST(ZerosInHugePagesTest, SmallSetsStayOnTheUsualAllocator) {
  std::vector<torch::Tensor> tensors = ZerosInHugePages({{16, 16}, {3}});
  ASSERT_EQ(tensors.size(), 2u);
  EXPECT_EQ(tensors[0].sizes().vec(), (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(tensors[0].count_nonzero().item<int64_t>(), 0);
  EXPECT_EQ(tensors[1].count_nonzero().item<int64_t>(), 0);
  // Not at the start of a region of their own (a 64-byte-aligned heap block lands on a 2 MiB
  // boundary once in 32,768).
  EXPECT_NE(Address(tensors[0]) % kHugePageBytes, 0u);
}

TEST(MoveToHugePagesTest, SameValuesNewStorageOthersLeftAlone) {
  torch::manual_seed(7);
  torch::Tensor weight = torch::randn({1024, 512});            // 2 MiB
  torch::Tensor strided = torch::randn({512, 256}).t();        // not contiguous
  torch::Tensor ids = torch::arange(10, torch::kInt64);        // not float32: stays
  torch::Tensor undefined;
  const torch::Tensor weight_before = weight, strided_before = strided.clone(), ids_before = ids;
  std::vector<torch::Tensor*> tensors = {&weight, &strided, &ids, &undefined};
  MoveToHugePages(tensors);
  EXPECT_TRUE(torch::equal(weight, weight_before));
  EXPECT_NE(weight.data_ptr(), weight_before.data_ptr());
  EXPECT_EQ(Address(weight) % kHugePageBytes, 0u);
  EXPECT_TRUE(torch::equal(strided, strided_before));
  EXPECT_TRUE(strided.is_contiguous());
  EXPECT_EQ(ids.data_ptr(), ids_before.data_ptr());
  EXPECT_FALSE(undefined.defined());
  // The old tensor (a view someone kept) still reads its own storage.
  weight.fill_(0.0f);
  EXPECT_FALSE(torch::equal(weight, weight_before));
}

}  // namespace
}  // namespace mnemo::util
