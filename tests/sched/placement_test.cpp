#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fixtures.h"

namespace cnlab::sched {
namespace {

using namespace testing;
using ::testing::HasSubstr;

int h100_profile(std::string_view name) { return *model::parse_mig_profile(*model::find_model("h100"), name, "p"); }

TEST(Placement, BlockSliceFillsAPartlyUsedGpuBeforeOpeningAnEmptyOne) {
  auto s = snapshot_of({gpu_node("a"), gpu_node("b")},
                       {running_job("r", "h100-50", "b", {blocks_on(3, 50)}, kHour), pending_job("p", "h100-25")});
  auto r = run_cycle(s, {});
  const Placement* p = placement_of(r, 1);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->nodes[0].node, 1u);
  EXPECT_EQ(p->nodes[0].gpus[0].gpu, 3);
  EXPECT_EQ(p->nodes[0].gpus[0].blocks, 25);
  EXPECT_EQ(p->nodes[0].gpus[0].vram_mib, 20 * 1024) << "25 blocks carry 25% of the GPU's memory";
}

TEST(Placement, TightestPartitionWins) {
  auto s = snapshot_of({gpu_node("a", "h100", 2)},
                       {running_job("r1", "h100-50", "a", {blocks_on(0, 50)}, kHour),
                        running_job("r2", "h100-70", "a", {blocks_on(1, 70)}, kHour), pending_job("p", "h100-30")});
  auto r = run_cycle(s, {});
  ASSERT_TRUE(placed(r, 2));
  EXPECT_EQ(placement_of(r, 2)->nodes[0].gpus[0].gpu, 1) << "30 free on GPU 1 is an exact fit";
}

TEST(Placement, ModelConstraintIsHeld) {
  auto s = snapshot_of({gpu_node("a100-node", "a100m80"), gpu_node("h100-node", "h100", 1)},
                       {running_job("r", "h100", "h100-node", {whole_gpu(0)}, kHour), pending_job("p", "h100-10")});
  auto r = run_cycle(s, {});
  EXPECT_FALSE(placed(r, 1));
  EXPECT_THAT(r.reason_for(1), HasSubstr("needs 10 blocks of h100; largest free on any h100 is 0 blocks"));
}

TEST(Placement, AnyModelTakesWhateverFits) {
  auto s = snapshot_of({gpu_node("l4-node", "l4", 1)}, {pending_job("p", "any-10")});
  EXPECT_TRUE(placed(run_cycle(s, {}), 0));
}

// With a candidate limit of 2, the tightest nodes alone would be the three half-used L4 nodes; each
// model gets its share, so the empty H100 node is weighed too, and the L4s stay for the L4-only jobs.
TEST(Placement, WholeGpuCandidatesIncludeEveryModel) {
  std::vector<model::Node> nodes;
  std::vector<model::Job> jobs;
  for (int i = 0; i < 3; ++i) {
    nodes.push_back(gpu_node("l4-" + std::to_string(i), "l4", 2));
    jobs.push_back(running_job("r" + std::to_string(i), "l4", "l4-" + std::to_string(i), {whole_gpu(0)}, kHour));
  }
  nodes.push_back(gpu_node("h100-node", "h100", 8));
  jobs.push_back(pending_job("any", "any", {.priority_class = "production"}));
  for (int i = 0; i < 3; ++i) jobs.push_back(pending_job("l4-only" + std::to_string(i), "l4"));
  PolicyConfig config;
  config.placement_candidates = 2;
  auto r = run_cycle(snapshot_of(nodes, jobs), config);
  ASSERT_TRUE(placed(r, 3));
  EXPECT_EQ(placement_of(r, 3)->nodes[0].node, 3u);
}

// The same for block slices: the empty H100 GPUs come first in catalog order, but the models take
// turns, so the L4 is weighed and the H100 node stays whole for the waiting 8-GPU gangs.
TEST(Placement, BlockCandidatesIncludeEveryModel) {
  std::vector<model::Job> jobs = {pending_job("slice", "any-25", {.priority_class = "production"})};
  for (int i = 0; i < 4; ++i) jobs.push_back(pending_job("gang" + std::to_string(i), "h100x8"));
  PolicyConfig config;
  config.placement_candidates = 2;
  auto r = run_cycle(snapshot_of({gpu_node("h100-node", "h100", 8), gpu_node("l4-node", "l4", 1)}, jobs), config);
  ASSERT_TRUE(placed(r, 0));
  EXPECT_EQ(placement_of(r, 0)->nodes[0].node, 1u);
  EXPECT_TRUE(placed(r, 1)) << r.reason_for(1);
}

TEST(Placement, GangIsAllOrNothingOnOneNode) {
  // 7 free GPUs on each of two nodes: 14 free in all, but an 8-GPU gang must sit on one node.
  auto s = snapshot_of({gpu_node("a"), gpu_node("b")},
                       {running_job("ra", "h100", "a", {whole_gpu(0)}, kHour),
                        running_job("rb", "h100", "b", {whole_gpu(0)}, kHour), pending_job("gang", "h100x8")});
  auto r = run_cycle(s, {});
  EXPECT_FALSE(placed(r, 2));
  EXPECT_THAT(r.reason_for(2), HasSubstr("the most free whole h100 on one node is 7"));
}

TEST(Placement, GangLargerThanANodeSpansWholeNodes) {
  auto s = snapshot_of({gpu_node("a"), gpu_node("b"), gpu_node("c")},
                       {running_job("rc", "h100", "c", {whole_gpu(0)}, kHour), pending_job("gang", "h100x16")});
  auto r = run_cycle(s, {});
  const Placement* p = placement_of(r, 1);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(p->nodes.size(), 2u);
  EXPECT_EQ(p->nodes[0].gpus.size() + p->nodes[1].gpus.size(), 16u);
  for (const auto& n : p->nodes) EXPECT_NE(n.node, 2u) << "the partly used node is not needed";
}

TEST(Placement, GangsMayBeKeptOnOneNode) {
  auto s = snapshot_of({gpu_node("a"), gpu_node("b")}, {pending_job("gang", "h100x16")});
  PolicyConfig config;
  config.gangs_span_nodes = false;
  auto r = run_cycle(s, config);
  EXPECT_FALSE(placed(r, 0));
  EXPECT_THAT(r.reason_for(0), HasSubstr("no node has 16 h100 GPUs, and gangs may not span nodes"));
}

TEST(Placement, WholeGpuGoesToTheBusiestNodeThatFits) {
  auto s =
      snapshot_of({gpu_node("idle"), gpu_node("busy")},
                  {running_job("r", "h100x4", "busy", {whole_gpu(0), whole_gpu(1), whole_gpu(2), whole_gpu(3)}, kHour),
                   pending_job("p", "h100x2")});
  auto r = run_cycle(s, {});
  ASSERT_TRUE(placed(r, 1));
  EXPECT_EQ(placement_of(r, 1)->nodes[0].node, 1u);
}

TEST(Placement, HostCpuAndMemoryAreRespected) {
  auto s = snapshot_of({gpu_node("small", "h100", 8, 8000, 64 * 1024), gpu_node("big")},
                       {pending_job("p", "h100-10", {.cpu_milli = 16000, .memory_mib = 32 * 1024})});
  s.nodes[1].idle_since.reset();
  auto r = run_cycle(s, {});
  ASSERT_TRUE(placed(r, 0));
  EXPECT_EQ(placement_of(r, 0)->nodes[0].node, 1u);
}

TEST(Placement, VramQuotaIsAResourceOfItsOwn) {
  // 50 blocks free on the GPU, but only 40Gi of its VRAM: a 10-block slice asking 50Gi waits.
  auto s = snapshot_of({gpu_node("a", "h100", 1)}, {running_job("r", "h100-50", "a", {{0, 50, 40 * 1024, -1}}, kHour),
                                                    pending_job("p", "h100-10", {.vram = "50Gi"})});
  auto r = run_cycle(s, {});
  EXPECT_FALSE(placed(r, 1));
  EXPECT_THAT(r.reason_for(1), HasSubstr("VRAM"));
  s.jobs[1] = pending_job("p", "h100-10", {.vram = "30Gi"});
  r = run_cycle(s, {});
  ASSERT_TRUE(placed(r, 1));
  EXPECT_EQ(placement_of(r, 1)->nodes[0].gpus[0].vram_mib, 30 * 1024);
}

TEST(Placement, MigRequestTakesAFreeInstanceFirst) {
  auto node = gpu_node("a", "h100", 2);
  node.gpus[1].mig_enabled = true;
  node.gpus[1].mig_instances = {{h100_profile("3g.40gb"), 0}, {h100_profile("3g.40gb"), 4}};
  auto s = snapshot_of({node}, {running_job("r", "h100:3g.40gb", "a", {{1, 42, 40 * 1024, 0}}, kHour),
                                pending_job("p", "h100:3g.40gb")});
  auto r = run_cycle(s, {});
  const Placement* p = placement_of(r, 1);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->nodes[0].gpus[0].gpu, 1);
  EXPECT_EQ(p->nodes[0].gpus[0].mig_start, 4);
  EXPECT_TRUE(r.repartitions.empty());
}

TEST(Placement, MigRequestCreatesAnInstanceInFreeSlots) {
  auto node = gpu_node("a", "h100", 1);
  node.gpus[0].mig_enabled = true;
  node.gpus[0].mig_instances = {{h100_profile("4g.40gb"), 0}};
  auto s = snapshot_of({node}, {pending_job("p", "h100:2g.20gb")});
  auto r = run_cycle(s, {});
  const Placement* p = placement_of(r, 0);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->nodes[0].gpus[0].mig_start, 4);
  ASSERT_EQ(r.repartitions.size(), 1u);
  EXPECT_EQ(r.repartitions[0].instances.size(), 2u);
}

TEST(Placement, MigRequestRepartitionsAnIdleWholeGpuOnABusyNode) {
  auto s = snapshot_of({gpu_node("idle", "h100", 2), gpu_node("busy", "h100", 2)},
                       {running_job("r", "h100", "busy", {whole_gpu(0)}, kHour), pending_job("p", "h100:1g.10gb")});
  auto r = run_cycle(s, {});
  const Placement* p = placement_of(r, 1);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->nodes[0].node, 1u);
  ASSERT_EQ(r.repartitions.size(), 1u);
  EXPECT_TRUE(r.repartitions[0].mig_enabled);
  EXPECT_EQ(r.repartitions[0].gpu, 1);
  EXPECT_EQ(r.repartitions[0].instances, (std::vector<model::MigInstance>{{h100_profile("1g.10gb"), 0}}));
}

TEST(Placement, RepartitioningCanBeTurnedOff) {
  auto s = snapshot_of({gpu_node("a", "h100", 1)}, {pending_job("p", "h100:1g.10gb")});
  PolicyConfig config;
  config.repartition_idle_gpus = false;
  auto r = run_cycle(s, config);
  EXPECT_FALSE(placed(r, 0));
  EXPECT_THAT(r.reason_for(0), HasSubstr("free 1g.10gb instances: 0"));
}

TEST(Placement, BlockSlicesShareAMigInstance) {
  auto node = gpu_node("a", "h100", 1);
  node.gpus[0].mig_enabled = true;
  node.gpus[0].mig_instances = {{h100_profile("7g.80gb"), 0}};
  auto s =
      snapshot_of({node}, {pending_job("p1", "h100-40"), pending_job("p2", "h100-40"), pending_job("p3", "h100-40")});
  auto r = run_cycle(s, {});
  EXPECT_TRUE(placed(r, 0));
  EXPECT_TRUE(placed(r, 1));
  EXPECT_FALSE(placed(r, 2)) << "the 7g instance holds 100 blocks";
  EXPECT_EQ(placement_of(r, 0)->nodes[0].gpus[0].mig_start, 0);
}

TEST(Placement, HostOnlyJobTakesCpuWhereItStrandsNoGpu) {
  // Node "full" has no free GPU left; its spare CPU is the cheapest place for a CPU-only job.
  auto s = snapshot_of({gpu_node("open", "h100", 2, 32000), gpu_node("full", "h100", 2, 32000)},
                       {running_job("r", "h100x2", "full", {whole_gpu(0), whole_gpu(1)}, kHour, {.cpu_milli = 8000}),
                        pending_job("prep", "none", {.cpu_milli = 16000})});
  auto r = run_cycle(s, {});
  const Placement* p = placement_of(r, 1);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->nodes[0].node, 1u);
  EXPECT_TRUE(p->nodes[0].gpus.empty());
}

TEST(Placement, UnschedulableNodesAndUnhealthyGpusGetNoNewWork) {
  auto cordoned = gpu_node("cordoned", "h100", 1);
  cordoned.unschedulable = true;
  auto sick = gpu_node("sick", "h100", 1);
  sick.gpus[0].healthy = false;
  auto s = snapshot_of({cordoned, sick}, {pending_job("p", "h100-10")});
  EXPECT_FALSE(placed(run_cycle(s, {}), 0));
}

TEST(Placement, RequestLargerThanTheClusterCanNeverFit) {
  auto s = snapshot_of({gpu_node("a")}, {pending_job("p", "h100x16"), pending_job("q", "h200-10")});
  auto r = run_cycle(s, {});
  EXPECT_THAT(r.reason_for(0), HasSubstr("can never fit: needs 16 whole h100 and the cluster has 8"));
  EXPECT_THAT(r.reason_for(1), HasSubstr("can never fit: the cluster has no h200 GPU"));
}

TEST(Placement, IdleNodesAreReportedForPowerDown) {
  auto s = snapshot_of({gpu_node("a"), gpu_node("b"), gpu_node("c")}, {pending_job("p", "h100-10")});
  s.nodes[2].idle_since = s.now - 5 * kMinute;  // idle, but not for long enough
  auto r = run_cycle(s, {});
  ASSERT_TRUE(placed(r, 0));
  NodeIndex busy = placement_of(r, 0)->nodes[0].node;
  std::vector<NodeIndex> expected;
  for (NodeIndex n : {0u, 1u}) {
    if (n != busy) expected.push_back(n);  // c has not been idle for 30m
  }
  std::vector<NodeIndex> reported;
  for (const auto& c : r.power_down) reported.push_back(c.node);
  EXPECT_EQ(reported, expected);
}

TEST(Placement, AMigLayoutNvidiaWouldRefuseKeepsItsGpuOutOfUse) {
  auto node = gpu_node("a", "h100", 2);
  node.gpus[0].mig_enabled = true;
  node.gpus[0].mig_instances = {{h100_profile("4g.40gb"), 0}, {h100_profile("4g.40gb"), 0}};  // overlap
  auto r = run_cycle(snapshot_of({node}, {pending_job("p1", "h100"), pending_job("p2", "h100")}), {});
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_THAT(r.warnings[0], HasSubstr("MIG layout refused"));
  EXPECT_EQ(r.placements.size(), 1u);
  EXPECT_EQ(r.placements[0].nodes[0].gpus[0].gpu, 1);
}

TEST(Placement, BadBindingsInTheSnapshotAreReportedNotFatal) {
  auto s = snapshot_of({gpu_node("a", "h100", 1)},
                       {running_job("ghost", "h100", "nowhere", {whole_gpu(0)}, kHour),
                        running_job("wrong", "h100", "a", {whole_gpu(5)}, kHour), pending_job("p", "h100")});
  auto r = run_cycle(s, {});
  ASSERT_EQ(r.warnings.size(), 2u);
  EXPECT_THAT(r.warnings[0], HasSubstr("unknown node \"nowhere\""));
  EXPECT_THAT(r.warnings[1], HasSubstr("has no GPU 5"));
  EXPECT_TRUE(placed(r, 2));
}

}  // namespace
}  // namespace cnlab::sched
