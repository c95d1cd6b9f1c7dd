// The heart of the simulator's credibility: BestFit and FGD on the published default workload,
// mean over seeds 42..51, within 0.5 points of the paper's curves at 100% and 130% arrived.
#include <gtest/gtest.h>

#include "shared_data.h"

#include <filesystem>

#include "sim/alloc_experiment.h"
#include "sim/alloc_report.h"
#include "sim/openb_trace.h"

namespace cnlab::sim {
namespace {

TEST(Fidelity, DefaultWorkloadBestFitAndFgdMatchThePublishedCurves) {
  CNLAB_SKIP_WITHOUT_OPENB_TRACE();
  auto nodes = load_openb_nodes(testing::openb_path("openb_node_list_gpu_node.csv"));
  ASSERT_TRUE(nodes) << nodes.error().to_string();
  auto pods = load_openb_pods(testing::openb_path("openb_pod_list_default.csv"));
  ASSERT_TRUE(pods) << pods.error().to_string();
  auto reference = load_reference_curves(testing::openb_path("reference_allocation_curves.csv"));
  ASSERT_TRUE(reference) << reference.error().to_string();
  auto cluster = AllocCluster::build(*nodes);
  ASSERT_TRUE(cluster) << cluster.error().to_string();
  auto workload = make_workload("openb_pod_list_default", *pods, *cluster);
  ASSERT_TRUE(workload) << workload.error().to_string();

  ExperimentSpec spec;
  spec.workloads = {std::move(*workload)};
  spec.policies = {"bestfit", "fgd"};
  for (uint64_t s = 42; s <= 51; ++s) spec.seeds.push_back(s);
  spec.threads = 2;
  auto result = run_experiment(*cluster, spec, PolicyRegistry::with_baselines());
  ASSERT_TRUE(result) << result.error().to_string();

  for (const PolicyCurve& c : result->curves) {
    const std::vector<int64_t>* ref = reference->find(c.workload, c.policy);
    ASSERT_NE(ref, nullptr) << c.policy;
    for (size_t k : {size_t{100}, size_t{130}}) {
      double ours = static_cast<double>(c.mean[k]) / 100, theirs = static_cast<double>((*ref)[k]) / 100;
      EXPECT_NEAR(ours, theirs, 0.5) << c.policy << " at " << k << "% arrived";
    }
  }
}

}  // namespace
}  // namespace cnlab::sim
