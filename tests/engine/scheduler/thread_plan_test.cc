// ResolveThreadPlan: the operator's numbers are kept; left to the engine, a cache-resident
// model gets row shards on every core and one prefill thread, a large one a single step and
// every thread for prefill.
#include "engine/scheduler/thread_plan.h"

#include <gtest/gtest.h>

namespace mnemo::scheduler {
namespace {

TEST(ThreadPlanTest, SmallModelsShardRowsAcrossTheCores) {
  const ThreadPlan plan = ResolveThreadPlan(int64_t{33} << 20, 4, 0, -1);  // the bundled model
  EXPECT_EQ(plan.decode_threads, 4);
  EXPECT_EQ(plan.prefill_threads, 1);
}

TEST(ThreadPlanTest, LargeModelsStepOnceOnTheIntraOpThreads) {
  const ThreadPlan plan = ResolveThreadPlan(int64_t{494} << 20, 4, 0, -1);  // GPT-2 124M
  EXPECT_EQ(plan.decode_threads, 1);
  EXPECT_EQ(plan.prefill_threads, 0);
  const ThreadPlan edge = ResolveThreadPlan(kCacheResidentWeightBytes + 1, 2, 0, -1);
  EXPECT_EQ(edge.decode_threads, 1);
  EXPECT_EQ(ResolveThreadPlan(kCacheResidentWeightBytes, 2, 0, -1).decode_threads, 2);
}

TEST(ThreadPlanTest, KeepsWhatTheOperatorSet) {
  const ThreadPlan plan = ResolveThreadPlan(int64_t{494} << 20, 4, 3, 2);
  EXPECT_EQ(plan.decode_threads, 3);
  EXPECT_EQ(plan.prefill_threads, 2);
  EXPECT_EQ(ResolveThreadPlan(1, 4, 0, 0).prefill_threads, 0);  // 0 = the intra-op setting
}

}  // namespace
}  // namespace mnemo::scheduler
