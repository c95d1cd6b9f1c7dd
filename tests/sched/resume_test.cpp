// A pending job resuming a process checkpoint taken while it held GPUs starts only where that
// checkpoint can be restored (sched/node_traits.h): on GPUs of the kind it was dumped on, and where
// the dump holds GPU state, on a node whose agent has NVIDIA's cuda-checkpoint.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fixtures.h"

namespace cnlab::sched {
namespace {

using namespace testing;
using ::testing::HasSubstr;

int h100_profile(std::string_view name) { return *model::parse_mig_profile(*model::find_model("h100"), name, "p"); }

// A process checkpoint as the server records it from the agent that took it.
model::CheckpointRef process_checkpoint(const std::string& gpus, bool gpu_state) {
  model::CheckpointRef ref{"sha256:" + std::string(64, 'a'), 1 << 20, t0() - kMinute, "process"};
  ref.gpus = gpus;
  ref.gpu_state = gpu_state;
  return ref;
}

model::Job resuming(model::Job job, const std::string& gpus = "real", bool gpu_state = true) {
  job.status.checkpoint = process_checkpoint(gpus, gpu_state);
  return job;
}

// A node whose agent has no cuda-checkpoint (gpu_node's has one).
model::Node plain(model::Node node) {
  node.gpu_checkpoint = false;
  return node;
}

model::Node simulated(model::Node node) {
  node.simulated = true;
  for (auto& gpu : node.gpus) gpu.simulated = true;
  return node;
}

NodeIndex node_of(const CycleResult& r, JobIndex job) {
  const Placement* p = placement_of(r, job);
  return p ? p->nodes[0].node : UINT32_MAX;
}

// Node "plain" already runs a job, so packing prefers it; only "able" restores GPU state.
Snapshot plain_busy_able_empty(model::Job pending, const std::string& running_gpu = "h100") {
  return snapshot_of({plain(gpu_node("plain", "h100", 2)), gpu_node("able", "h100", 2)},
                     {running_job("other", running_gpu, "plain", {whole_gpu(0)}, kHour), std::move(pending)});
}

TEST(Resume, ADumpHoldingGpuStateStartsOnlyOnANodeThatRestoresIt) {
  for (const char* gpu : {"h100", "h100-30"}) {
    SCOPED_TRACE(gpu);
    model::Job job = pending_job("resumed", gpu, {.checkpointable = true});
    EXPECT_EQ(node_of(run_cycle(plain_busy_able_empty(job), {}), 1), 0u) << "without a checkpoint, packing chooses";
    EXPECT_EQ(node_of(run_cycle(plain_busy_able_empty(resuming(job)), {}), 1), 1u);
    // A files checkpoint, or a process dump without GPU state, restores anywhere.
    job.status.checkpoint = process_checkpoint("real", false);
    EXPECT_EQ(node_of(run_cycle(plain_busy_able_empty(job), {}), 1), 0u);
    job.status.checkpoint->kind = "files";
    job.status.checkpoint->gpus.clear();
    EXPECT_EQ(node_of(run_cycle(plain_busy_able_empty(job), {}), 1), 0u);
  }
}

TEST(Resume, AMigJobsDumpHoldingGpuStateTakesAnInstanceOnlyWhereItCanBeRestored) {
  auto plain_node = plain(gpu_node("plain", "h100", 1));
  plain_node.gpus[0].mig_enabled = true;
  plain_node.gpus[0].mig_instances = {{h100_profile("3g.40gb"), 0}};  // a free instance: the first choice
  auto able = gpu_node("able", "h100", 1);
  auto s = snapshot_of({plain_node, able}, {resuming(pending_job("resumed", "h100:3g.40gb", {.checkpointable = true}))});
  auto r = run_cycle(s, {});
  EXPECT_EQ(node_of(r, 0), 1u) << r.reason_for(0);
  s.jobs[0].status.checkpoint.reset();
  EXPECT_EQ(node_of(run_cycle(s, {}), 0), 0u);
}

TEST(Resume, AGangsDumpSpansOnlyNodesThatRestoreItsGpuState) {
  auto s = snapshot_of({plain(gpu_node("plain", "h100", 2)), gpu_node("able-1", "h100", 2),
                        gpu_node("able-2", "h100", 2)},
                       {resuming(pending_job("gang", "h100x4", {.checkpointable = true}))});
  auto r = run_cycle(s, {});
  const Placement* p = placement_of(r, 0);
  ASSERT_NE(p, nullptr) << r.reason_for(0);
  ASSERT_EQ(p->nodes.size(), 2u);
  for (const auto& node : p->nodes) EXPECT_NE(node.node, 0u) << "plain cannot restore its GPU state";
}

TEST(Resume, ItWaitsForRoomOnANodeThatRestoresItsGpuStateAndSaysSo) {
  auto s = snapshot_of({plain(gpu_node("plain", "h100", 2)), gpu_node("able", "h100", 1)},
                       {running_job("holder", "h100", "able", {whole_gpu(0)}, 5 * kMinute),
                        resuming(pending_job("resumed", "h100", {.checkpointable = true}))});
  auto r = run_cycle(s, {});
  EXPECT_FALSE(placed(r, 1)) << "plain has two free GPUs, but nothing there resumes the job's GPU state";
  EXPECT_THAT(r.reason_for(1), HasSubstr("needs 1 whole h100 on a node with real GPUs and NVIDIA's cuda-checkpoint "
                                         "(to resume its checkpoint); none of the 1 schedulable nodes that have them "
                                         "has that free now"));
  s.nodes[1].unschedulable = true;
  EXPECT_THAT(run_cycle(s, {}).reason_for(1), HasSubstr("; no schedulable node has them now"));
}

TEST(Resume, APreemptionForItTakesItsRoomOnANodeThatRestoresItsGpuState) {
  // Ten one-GPU nodes each run an opportunistic job; only the last restores GPU state, and its job
  // has lost the most work. The resumed production job evicts that one: the cheaper victims are on
  // nodes where it could not resume (more of them than the scheduler verifies).
  std::vector<model::Node> nodes;
  std::vector<model::Job> jobs;
  for (int i = 0; i < 10; ++i) {
    const std::string name = "n" + std::to_string(i);
    nodes.push_back(i < 9 ? plain(gpu_node(name, "h100", 1)) : gpu_node(name, "h100", 1));
    jobs.push_back(running_job("opp-" + name, "h100", name, {whole_gpu(0)}, (i < 9 ? 20 : 300) * kMinute,
                               {.priority_class = "opportunistic"}));
  }
  jobs.push_back(resuming(pending_job("resumed", "h100", {.priority_class = "production", .checkpointable = true})));
  auto s = snapshot_of(nodes, jobs);
  auto r = run_cycle(s, {});
  ASSERT_EQ(r.preemptions.size(), 1u) << r.reason_for(10);
  EXPECT_EQ(r.preemptions[0].victim, 9u);
  EXPECT_EQ(node_of(r, 10), 9u);
  s.jobs[10].status.checkpoint.reset();
  r = run_cycle(s, {});
  ASSERT_EQ(r.preemptions.size(), 1u);
  EXPECT_NE(r.preemptions[0].victim, 9u) << "without the dump, a victim that lost less work goes";
}

TEST(Resume, ASimulatedGpusDumpStartsOnSimulatedGpusAndARealOnesOnRealOnes) {
  auto s = snapshot_of({gpu_node("real", "h100", 2), simulated(gpu_node("sim", "h100", 2))},
                       {running_job("other", "h100", "real", {whole_gpu(0)}, kHour),
                        resuming(pending_job("resumed", "h100", {.checkpointable = true}), "simulated", false)});
  EXPECT_EQ(node_of(run_cycle(s, {}), 1), 1u);
  s.jobs[1].status.checkpoint->gpus = "real";
  s.jobs[0].status.placement[0].node = "sim";  // packing would now choose "sim"
  EXPECT_EQ(node_of(run_cycle(s, {}), 1), 0u);
}

TEST(Resume, WhereEveryNodeThatCouldRestoreItIsLostItStartsAnywhere) {
  auto able = gpu_node("able", "h100", 1);
  able.phase = model::NodePhase::kLost;
  auto s = snapshot_of({plain(gpu_node("plain", "h100", 1)), able}, {resuming(pending_job("resumed", "h100", {.checkpointable = true}))});
  EXPECT_EQ(node_of(run_cycle(s, {}), 0), 0u) << "it starts again from the beginning rather than wait for good";
  // A node that is only NotReady (an agent restarting) is waited for.
  s.nodes[1].phase = model::NodePhase::kNotReady;
  auto r = run_cycle(s, {});
  EXPECT_FALSE(placed(r, 0));
  EXPECT_THAT(r.reason_for(0), HasSubstr("no schedulable node has them now"));
}

}  // namespace
}  // namespace cnlab::sched
