// CNLab's policy in the simulator is the production scheduler's placement: the same decisions as a
// direct sched::run_cycle on the same snapshot, and (on the published workload) better than FGD.
#include <gtest/gtest.h>

#include "shared_data.h"

#include <filesystem>
#include <random>

#include "sched/scheduler.h"
#include "sim/alloc_experiment.h"
#include "sim/openb_trace.h"
#include "sim/policies/cnlab_policy.h"
#include "sim/policy_registry.h"

namespace cnlab::sim {
namespace {

Pod random_pod(std::mt19937_64& rng, const AllocCluster& cluster) {
  static const int kMilli[] = {1000, 1000, 1000, 810, 470, 320, 650, 230, 160, 0};
  Pod pod;
  pod.gpu_milli = kMilli[rng() % 10];
  pod.num_gpu = pod.gpu_milli == 0 ? 0 : (pod.gpu_milli == 1000 && rng() % 5 == 0 ? 2 : 1);
  pod.cpu_milli = static_cast<int32_t>(1000 * (1 + rng() % 16));
  pod.memory_mib = static_cast<int32_t>(1024 * (1 + rng() % 32));
  if (rng() % 6 == 0 && pod.num_gpu > 0) pod.allowed_models = cluster.model_mask(std::vector<std::string>{"T4"});
  return pod;
}

TEST(CnlabPolicy, TranslatesPodsIntoSliceRequests) {
  std::vector<OpenbNode> nodes = {{"n0", 32000, 65536, 2, "T4"}, {"n1", 64000, 131072, 4, "G2"}};
  auto cluster = std::move(AllocCluster::build(nodes).value());
  auto spec = [&](Pod p) { return model::to_string(CnlabPolicy::spec_of(p, cluster).gpu); };
  EXPECT_EQ(spec(Pod{4000, 1024, 1, 810, kAnyModel}), "any-81");
  EXPECT_EQ(spec(Pod{4000, 1024, 2, 1000, kAnyModel}), "anyx2");
  EXPECT_EQ(spec(Pod{4000, 1024, 0, 0, kAnyModel}), "none");
  EXPECT_EQ(spec(Pod{4000, 1024, 1, 1000, cluster.model_mask(std::vector<std::string>{"G2"})}), "g2");
  auto as_nodes = CnlabPolicy::nodes_of(cluster);
  ASSERT_EQ(as_nodes.size(), 2u);
  EXPECT_EQ(as_nodes[1].gpus.size(), 4u);
  EXPECT_EQ(model::gpu_model(as_nodes[0].gpus[0].model).name, "t4");
  EXPECT_TRUE(as_nodes[0].simulated);
}

// Runs the policy pod by pod; before each pod, builds the snapshot the scheduler would see (placed
// pods running, failed pods still pending, the new pod pending last) and checks that run_cycle
// places the new pod exactly where the simulator's policy does.
TEST(CnlabPolicy, MakesTheSameDecisionsAsTheSchedulerOnTheSameSnapshot) {
  std::vector<OpenbNode> nodes;
  for (int i = 0; i < 12; ++i) {
    nodes.push_back({"node-" + std::to_string(i), 16000 * (1 + i % 4), 65536 * (1 + i % 3), i % 3 == 0 ? 2 : 8,
                     i % 3 == 0 ? "T4" : "G2"});
  }
  auto cluster = std::move(AllocCluster::build(nodes).value());
  std::vector<uint32_t> ranks(nodes.size());
  for (uint32_t i = 0; i < ranks.size(); ++i) ranks[i] = i;
  cluster.reset(ranks);
  CnlabPolicy policy;
  policy.reset(cluster, RunContext{"test", 1, 130});

  sched::Snapshot snapshot;
  snapshot.now = *parse_rfc3339("2026-11-30T10:00:00Z", "now");
  snapshot.nodes = CnlabPolicy::nodes_of(cluster);
  std::mt19937_64 rng(7);
  int compared = 0, placed = 0;
  for (int i = 0; i < 160; ++i) {
    Pod pod = random_pod(rng, cluster);
    model::Job job;
    job.meta.name = "pod-" + std::to_string(i);
    job.spec = CnlabPolicy::spec_of(pod, cluster);
    job.status.submitted_at = snapshot.now - Duration{1000 - i};
    snapshot.jobs.push_back(job);
    sched::CycleResult cycle = sched::run_cycle(snapshot, CnlabPolicy::scheduler_config());
    const sched::Placement* direct = nullptr;
    for (const auto& p : cycle.placements) {
      ASSERT_EQ(p.job, static_cast<sched::JobIndex>(i)) << "only the new pod can be placed";
      direct = &p;
    }

    policy.on_arrival(pod);
    std::vector<NodeIndex> feasible;
    for (NodeIndex n = 0; n < cluster.node_count(); ++n) {
      if (cluster.fits(pod, n)) feasible.push_back(n);
    }
    std::optional<Choice> choice;
    if (!feasible.empty()) choice = policy.place(pod, cluster, feasible);
    ASSERT_EQ(choice.has_value(), direct != nullptr) << "pod " << i;
    ++compared;
    if (!choice) continue;
    ++placed;
    ASSERT_EQ(direct->nodes.size(), 1u);
    EXPECT_EQ(direct->nodes[0].node, choice->node) << "pod " << i;
    uint32_t gpus = 0;
    for (const auto& g : direct->nodes[0].gpus) gpus |= uint32_t{1} << g.gpu;
    EXPECT_EQ(gpus, choice->gpus) << "pod " << i;
    ASSERT_TRUE(cluster.apply(pod, *choice));
    sched::apply_decisions(cycle, snapshot);
  }
  EXPECT_EQ(compared, 160);
  EXPECT_GT(placed, 40);
  EXPECT_LT(placed, 160) << "the cluster must fill up so failures are compared too";
}

TEST(CnlabPolicy, BeatsFgdOnThePublishedDefaultWorkload) {
  CNLAB_SKIP_WITHOUT_OPENB_TRACE();
  auto nodes = load_openb_nodes(testing::openb_path("openb_node_list_gpu_node.csv"));
  ASSERT_TRUE(nodes) << nodes.error().to_string();
  auto pods = load_openb_pods(testing::openb_path("openb_pod_list_default.csv"));
  ASSERT_TRUE(pods) << pods.error().to_string();
  auto cluster = AllocCluster::build(*nodes);
  ASSERT_TRUE(cluster);
  auto workload = make_workload("openb_pod_list_default", *pods, *cluster);
  ASSERT_TRUE(workload);
  ExperimentSpec spec;
  spec.workloads = {std::move(*workload)};
  spec.policies = {"fgd", "cnlab"};
  for (uint64_t s = 42; s <= 51; ++s) spec.seeds.push_back(s);
  spec.threads = 2;
  auto result = run_experiment(*cluster, spec, default_policies());
  ASSERT_TRUE(result) << result.error().to_string();
  ASSERT_EQ(result->curves.size(), 2u);
  const PolicyCurve& fgd = result->curves[0].policy == "FGD" ? result->curves[0] : result->curves[1];
  const PolicyCurve& cnlab = result->curves[0].policy == "CNLab" ? result->curves[0] : result->curves[1];
  EXPECT_GT(cnlab.mean[130], fgd.mean[130]);
  EXPECT_GT(cnlab.mean[100], fgd.mean[100]);
}

}  // namespace
}  // namespace cnlab::sim
