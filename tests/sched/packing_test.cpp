// The packing scorer and the workload profile it learns: capacity kept usable for the shapes that
// arrive, GPUs not stranded behind used-up CPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fixtures.h"
#include "sched/job_shape.h"
#include "sched/workload_profile.h"

namespace cnlab::sched {
namespace {

using namespace testing;

JobShape shape_of(std::string_view gpu, int64_t cpu_milli = 0) {
  JobShape s = JobShape::of(pending_job("x", gpu).spec);
  s.cpu_milli = cpu_milli;
  return s;
}

TEST(WorkloadProfile, TypicalShapesCoverNinetyFivePercentMostCommonFirst) {
  WorkloadProfile profile;
  for (int i = 0; i < 90; ++i) profile.add(shape_of("h100-50"));
  for (int i = 0; i < 6; ++i) profile.add(shape_of("h100"));
  for (int i = 0; i < 4; ++i) profile.add(shape_of("h100-10"));
  const auto& typical = profile.typical();
  ASSERT_EQ(typical.size(), 2u) << "90 + 6 of 100 jobs reach 95%; the 10-block shape is left out";
  double sum = 0;
  for (const auto& t : typical) sum += t.weight;
  EXPECT_DOUBLE_EQ(sum, 1.0);
  for (const auto& t : typical) {
    if (t.shape.blocks == 50) {
      EXPECT_DOUBLE_EQ(t.weight, 90.0 / 96.0);
    }
  }
}

TEST(WorkloadProfile, VersionMovesWithTheSetOfShapesNotWithTheirWeights) {
  WorkloadProfile profile;
  profile.add(shape_of("h100-50"));
  uint64_t v1 = profile.version();
  profile.add(shape_of("h100-50"));
  EXPECT_EQ(profile.version(), v1);
  for (int i = 0; i < 5; ++i) profile.add(shape_of("h100"));
  EXPECT_NE(profile.version(), v1);
}

TEST(WorkloadProfile, HostMemoryIsNotPartOfTheShapeButCpuIs) {
  WorkloadProfile profile;
  JobShape a = shape_of("h100-50", 4000), b = a, c = a;
  b.memory_mib = 1024;
  c.cpu_milli = 8000;
  profile.add(a);
  profile.add(b);
  profile.add(c);
  ASSERT_EQ(profile.typical().size(), 2u);
  EXPECT_DOUBLE_EQ(profile.cpu_per_block(), (4000.0 + 4000 + 8000) / 150);
}

TEST(Packing, KeepsAFreeSlotOfTheCommonShapeRatherThanFitTightest) {
  // 50-block jobs are the common shape. GPU 0 has exactly 50 blocks free, GPU 1 has 65. Tightest
  // fit would put the 10-block job (higher tier, so placed first) on GPU 0, and then only one
  // 50-block job would fit; keeping GPU 0's slot lets both fit.
  std::vector<model::Job> jobs = {running_job("r0", "h100-50", "a", {blocks_on(0, 50)}, kHour),
                                  running_job("r1", "h100-35", "a", {blocks_on(1, 35)}, kHour),
                                  pending_job("small", "h100-10", {.priority_class = "production"})};
  for (int i = 0; i < 8; ++i) jobs.push_back(pending_job("big" + std::to_string(i), "h100-50"));
  auto r = run_cycle(snapshot_of({gpu_node("a", "h100", 2)}, jobs), {});
  ASSERT_TRUE(placed(r, 2));
  EXPECT_EQ(placement_of(r, 2)->nodes[0].gpus[0].gpu, 1);
  EXPECT_EQ(r.placements.size(), 3u) << "the small job and two 50-block jobs";
}

TEST(Packing, CpuHungryJobGoesWhereCpuIsPlentiful) {
  // Both nodes have 8 free GPUs. "lean" has 12 cores per GPU, "rich" 50: the 40-core one-GPU job
  // would leave lean's other GPUs without CPU for the 10-core jobs that arrive.
  std::vector<model::Job> jobs = {pending_job("hungry", "h100", {.cpu_milli = 40000, .submitted_ago = kDay})};
  for (int i = 0; i < 30; ++i) {
    jobs.push_back(running_job("w" + std::to_string(i), "h100", i < 15 ? "lean" : "rich", {whole_gpu(8 + i % 15)},
                               kHour, {.cpu_milli = 10000}));
  }
  auto lean = gpu_node("lean", "h100", 23, 12000 * 8 + 150000);
  auto rich = gpu_node("rich", "h100", 23, 50000 * 8 + 150000);
  auto r = run_cycle(snapshot_of({lean, rich}, jobs), {});
  ASSERT_TRUE(placed(r, 0));
  EXPECT_EQ(placement_of(r, 0)->nodes[0].node, 1u);
}

TEST(Packing, MemoryHungryJobGoesWhereMemoryIsPlentiful) {
  // As above with host memory: 64 GiB per GPU job; "lean" has exactly that per free GPU, "rich" five
  // times it. The 200 GiB job would leave lean's other GPUs without memory for the jobs that arrive.
  constexpr int64_t kGi = 1024;
  std::vector<model::Job> jobs = {pending_job("hungry", "h100", {.memory_mib = 200 * kGi, .submitted_ago = kDay})};
  for (int i = 0; i < 30; ++i) {
    jobs.push_back(running_job("w" + std::to_string(i), "h100", i < 15 ? "lean" : "rich", {whole_gpu(8 + i % 15)},
                               kHour, {.memory_mib = 64 * kGi}));
  }
  auto lean = gpu_node("lean", "h100", 23, 1'000'000, 64 * kGi * 8 + 15 * 64 * kGi);
  auto rich = gpu_node("rich", "h100", 23, 1'000'000, 320 * kGi * 8 + 15 * 64 * kGi);
  auto r = run_cycle(snapshot_of({lean, rich}, jobs), {});
  ASSERT_TRUE(placed(r, 0));
  EXPECT_EQ(placement_of(r, 0)->nodes[0].node, 1u);
}

TEST(Packing, GpusOfAScarceModelAreKeptForTheJobsThatNeedThem) {
  // Two L4s and sixteen H100s. Two waiting jobs accept only an L4, six only an H100. A job that takes
  // any GPU goes first: on an L4 it would leave an L4 job without a GPU; an H100 is the cheaper loss
  // although more jobs ask for H100s, because there are eight times as many of them.
  std::vector<model::Job> jobs = {pending_job("any", "any", {.priority_class = "production"})};
  for (int i = 0; i < 2; ++i) jobs.push_back(pending_job("l4-" + std::to_string(i), "l4"));
  for (int i = 0; i < 6; ++i) jobs.push_back(pending_job("h100-" + std::to_string(i), "h100"));
  auto r = run_cycle(snapshot_of({gpu_node("l4-node", "l4", 2), gpu_node("h100-node", "h100", 16)}, jobs), {});
  ASSERT_TRUE(placed(r, 0));
  EXPECT_EQ(placement_of(r, 0)->nodes[0].node, 1u);
  EXPECT_EQ(r.placements.size(), jobs.size()) << "every job fits when the any-model job leaves the L4s alone";
}

}  // namespace
}  // namespace cnlab::sched
