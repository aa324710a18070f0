// ScopedOmpThreads: sets the calling thread's OpenMP count for a scope, restores it, and leaves
// other threads alone.
#include "engine/util/omp_threads.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <thread>

namespace mnemo::util {
namespace {

TEST(ScopedOmpThreadsTest, SetsForTheScopeAndRestores) {
  at::set_num_threads(2);
  ASSERT_EQ(at::get_num_threads(), 2);
  {
    ScopedOmpThreads one(1);
    EXPECT_EQ(at::get_num_threads(), 1);
    {
      ScopedOmpThreads three(3);
      EXPECT_EQ(at::get_num_threads(), 3);
    }
    EXPECT_EQ(at::get_num_threads(), 1);
  }
  EXPECT_EQ(at::get_num_threads(), 2);
}

TEST(ScopedOmpThreadsTest, ZeroOrLessLeavesTheCountAlone) {
  at::set_num_threads(2);
  {
    ScopedOmpThreads none(0);
    EXPECT_EQ(at::get_num_threads(), 2);
    ScopedOmpThreads negative(-1);
    EXPECT_EQ(at::get_num_threads(), 2);
  }
  EXPECT_EQ(at::get_num_threads(), 2);
}

TEST(ScopedOmpThreadsTest, OtherThreadsKeepTheirCount) {
  at::set_num_threads(2);
  int seen = 0;
  {
    ScopedOmpThreads one(1);
    std::thread other([&] { seen = at::get_num_threads(); });
    other.join();
    EXPECT_EQ(at::get_num_threads(), 1);
  }
  EXPECT_EQ(seen, 2);
}

}  // namespace
}  // namespace mnemo::util
