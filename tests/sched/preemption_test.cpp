#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fixtures.h"

namespace cnlab::sched {
namespace {

using namespace testing;

std::vector<JobIndex> victims(const CycleResult& r) {
  std::vector<JobIndex> v;
  for (const auto& p : r.preemptions) v.push_back(p.victim);
  return v;
}

TEST(Preemption, InferencePreemptsDevTraining) {
  auto s = snapshot_of({gpu_node("a", "h100", 1)},
                       {running_job("train", "h100", "a", {whole_gpu(0)}, kHour, {.checkpointable = true}),
                        pending_job("serve", "h100", {.priority_class = "inference"})});
  s.jobs[0].status.last_checkpoint_at = t0() - 10 * kMinute;
  auto r = run_cycle(s, {});
  ASSERT_EQ(r.preemptions.size(), 1u);
  EXPECT_EQ(r.preemptions[0].victim, 0u);
  EXPECT_TRUE(r.preemptions[0].checkpoint);
  EXPECT_TRUE(r.preemptions[0].requeue);
  EXPECT_EQ(r.preemptions[0].work_lost, 10 * kMinute);
  ASSERT_TRUE(placed(r, 1));
  EXPECT_EQ(placement_of(r, 1)->after_preempting, std::vector<JobIndex>{0});
}

TEST(Preemption, DevDoesNotPreempt) {
  auto s = snapshot_of({gpu_node("a", "h100", 1)},
                       {running_job("other", "h100", "a", {whole_gpu(0)}, kHour, {.priority_class = "opportunistic"}),
                        pending_job("mine", "h100", {.priority_class = "dev"})});
  auto r = run_cycle(s, {});
  EXPECT_TRUE(r.preemptions.empty());
}

TEST(Preemption, FewestVictimsWin) {
  // Node a: one 100-block dev job. Node b: four 25-block dev jobs. One victim beats four.
  auto s = snapshot_of({gpu_node("a", "h100", 1), gpu_node("b", "h100", 1)},
                       {running_job("big", "h100", "a", {whole_gpu(0)}, kHour),
                        running_job("s1", "h100-25", "b", {blocks_on(0, 25)}, kHour),
                        running_job("s2", "h100-25", "b", {blocks_on(0, 25)}, kHour),
                        running_job("s3", "h100-25", "b", {blocks_on(0, 25)}, kHour),
                        running_job("s4", "h100-25", "b", {blocks_on(0, 25)}, kHour),
                        pending_job("serve", "h100", {.priority_class = "inference"})});
  EXPECT_EQ(victims(run_cycle(s, {})), std::vector<JobIndex>{0});
}

TEST(Preemption, LowestTierThenCheckpointableThenLeastWorkLost) {
  // Three one-GPU nodes. opportunistic goes before dev; among dev, checkpointable before not.
  auto s = snapshot_of({gpu_node("a", "h100", 1), gpu_node("b", "h100", 1), gpu_node("c", "h100", 1)},
                       {running_job("dev-plain", "h100", "a", {whole_gpu(0)}, kHour),
                        running_job("dev-ckpt", "h100", "b", {whole_gpu(0)}, kHour, {.checkpointable = true}),
                        running_job("opp", "h100", "c", {whole_gpu(0)}, 10 * kHour, {.priority_class = "opportunistic"}),
                        pending_job("serve1", "h100", {.priority_class = "inference", .submitted_ago = Duration{30}}),
                        pending_job("serve2", "h100", {.priority_class = "inference", .submitted_ago = Duration{20}}),
                        pending_job("serve3", "h100", {.priority_class = "inference", .submitted_ago = Duration{10}})});
  EXPECT_EQ(victims(run_cycle(s, {})), (std::vector<JobIndex>{2, 1, 0}));
}

TEST(Preemption, LeastWorkLostAmongEquals) {
  auto s = snapshot_of({gpu_node("a", "h100", 1), gpu_node("b", "h100", 1)},
                       {running_job("long", "h100", "a", {whole_gpu(0)}, 5 * kHour),
                        running_job("short", "h100", "b", {whole_gpu(0)}, kHour),
                        pending_job("serve", "h100", {.priority_class = "inference"})});
  EXPECT_EQ(victims(run_cycle(s, {})), std::vector<JobIndex>{1});
}

TEST(Preemption, MinimumRuntimeProtectsFreshJobs) {
  auto s = snapshot_of({gpu_node("a", "h100", 1)},
                       {running_job("fresh", "h100", "a", {whole_gpu(0)}, 5 * kMinute),
                        pending_job("serve", "h100", {.priority_class = "inference"})});
  auto r = run_cycle(s, {});
  EXPECT_TRUE(r.preemptions.empty()) << "dev jobs run at least 10 minutes";
  s.jobs[0].status.started_at = t0() - 11 * kMinute;
  EXPECT_EQ(victims(run_cycle(s, {})), std::vector<JobIndex>{0});
}

TEST(Preemption, OnlyTheVictimsNeededAreEvicted) {
  // 60 free blocks are missing 20: one 25-block victim suffices, not both.
  auto s = snapshot_of({gpu_node("a", "h100", 1)},
                       {running_job("v1", "h100-15", "a", {blocks_on(0, 15)}, kHour),
                        running_job("v2", "h100-25", "a", {blocks_on(0, 25)}, 2 * kHour),
                        pending_job("serve", "h100-80", {.priority_class = "inference"})});
  auto r = run_cycle(s, {});
  EXPECT_EQ(victims(r), std::vector<JobIndex>{1}) << "v1 alone frees only 75 blocks";
}

TEST(Preemption, SameTierIsNeverEvicted) {
  auto s = snapshot_of({gpu_node("a", "h100", 1)},
                       {running_job("serve-old", "h100", "a", {whole_gpu(0)}, kHour, {.priority_class = "inference"}),
                        pending_job("serve-new", "h100", {.priority_class = "inference"})});
  EXPECT_TRUE(run_cycle(s, {}).preemptions.empty());
}

}  // namespace
}  // namespace cnlab::sched
