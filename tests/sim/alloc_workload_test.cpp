// The run plan: shuffle, the tuning quirks of the original simulator, and node ranks.
#include "sim/alloc_workload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace cnlab::sim {
namespace {

Pod gpu_pod(int gpus, int milli) { return Pod{1000, 1, gpus, milli, kAnyModel}; }
Pod cpu_pod() { return Pod{1000, 1, 0, 0, kAnyModel}; }

int64_t demand(const std::vector<Pod>& pods, const RunPlan& plan) {
  int64_t sum = 0;
  for (uint32_t i : plan.order) sum += pods[i].gpu_request();
  return sum;
}

TEST(RunPlan, TuningUpJudgesADrawByItsPerGpuMilliNotItsWholeRequest) {
  // C = 4000, T = 130% = 5200, one 2-GPU pod (request 2000, per-GPU milli 1000):
  // R 2000: 2000 + 1000 <= 5200, append (R 4000); 4000 + 1000 <= 5200, append (R 6000, past T);
  // 6000 + 1000 > 5200, stop. Judging the whole request would have stopped at R 4000.
  std::vector<Pod> pods = {gpu_pod(2, 1000)};
  RunPlan plan = make_run_plan(pods, 3, 4000, 42, 130);
  EXPECT_EQ(plan.order, (std::vector<uint32_t>{0, 0, 0}));
  EXPECT_EQ(demand(pods, plan), 6000);
}

TEST(RunPlan, TuningUpAppendsDrawsFromTheTraceAfterTheShuffledOriginals) {
  // C = 1000, T = 1300; R starts at 500. CPU-only draws are appended without adding demand; the
  // first 500-milli draw brings R to 1000, the next one would pass T and ends the tuning (CPU-only
  // draws between the two are still appended).
  std::vector<Pod> pods = {gpu_pod(1, 500), cpu_pod()};
  for (uint64_t seed = 0; seed < 20; ++seed) {
    RunPlan plan = make_run_plan(pods, 1, 1000, seed, 130);
    ASSERT_GE(plan.order.size(), 3u);
    std::vector<uint32_t> head(plan.order.begin(), plan.order.begin() + 2);
    std::sort(head.begin(), head.end());
    EXPECT_EQ(head, (std::vector<uint32_t>{0, 1}));
    EXPECT_EQ(std::count(plan.order.begin(), plan.order.end(), 0u), 2);
    EXPECT_EQ(demand(pods, plan), 1000);
  }
}

TEST(RunPlan, TuningDownRemovesRandomPodsUntilDemandIsAtMostTheTarget) {
  // C = 1000, T = 1300; four whole GPUs (4000) and three CPU-only pods: remove until R <= 1300,
  // which leaves exactly one GPU pod, in shuffled order.
  std::vector<Pod> pods = {gpu_pod(1, 1000), cpu_pod(), gpu_pod(1, 1000), cpu_pod(),
                           gpu_pod(1, 1000), cpu_pod(), gpu_pod(1, 1000)};
  for (uint64_t seed = 0; seed < 20; ++seed) {
    RunPlan plan = make_run_plan(pods, 2, 1000, seed, 130);
    EXPECT_EQ(demand(pods, plan), 1000);
    std::vector<uint32_t> sorted = plan.order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_TRUE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end()) << "no pod is repeated";
  }
}

TEST(RunPlan, ATraceWithoutGpuDemandIsOnlyShuffled) {
  std::vector<Pod> pods = {cpu_pod(), cpu_pod(), cpu_pod()};
  RunPlan plan = make_run_plan(pods, 1, 1000, 1, 130);
  EXPECT_EQ(plan.order.size(), 3u);
}

TEST(RunPlan, SameSeedSamePlanAndRanksArePermutations) {
  std::vector<Pod> pods;
  for (int i = 0; i < 200; ++i) pods.push_back(i % 3 == 0 ? cpu_pod() : gpu_pod(1, 100 + i));
  // Demand 26567 against T = 52000: tuned up, so the 200 originals come first.
  RunPlan a = make_run_plan(pods, 50, 40000, 42, 130);
  RunPlan b = make_run_plan(pods, 50, 40000, 42, 130);
  RunPlan c = make_run_plan(pods, 50, 40000, 43, 130);
  ASSERT_GT(a.order.size(), 200u);
  EXPECT_EQ(a.order, b.order);
  EXPECT_EQ(a.ranks, b.ranks);
  EXPECT_NE(a.order, c.order);
  EXPECT_NE(a.ranks, c.ranks);
  std::vector<uint32_t> ranks = a.ranks;
  std::sort(ranks.begin(), ranks.end());
  std::vector<uint32_t> identity(50);
  std::iota(identity.begin(), identity.end(), 0u);
  EXPECT_EQ(ranks, identity);
  // The shuffle moves pods: the first 200 entries are a permutation, not the identity.
  std::vector<uint32_t> head(a.order.begin(), a.order.begin() + 200);
  EXPECT_FALSE(std::is_sorted(head.begin(), head.end()));
  std::sort(head.begin(), head.end());
  std::vector<uint32_t> all(200);
  std::iota(all.begin(), all.end(), 0u);
  EXPECT_EQ(head, all);
}

TEST(Workload, SortsTheTraceByNameAndMapsSpecsToModels) {
  std::vector<OpenbNode> nodes = {{"n0", 1000, 1000, 1, "T4"}, {"n1", 1000, 1000, 1, "V100"}};
  AllocCluster cluster = std::move(AllocCluster::build(nodes).value());
  std::vector<OpenbPod> trace(2);
  trace[0].name = "pod-b";
  trace[0].num_gpu = 1;
  trace[0].gpu_milli = 300;
  trace[0].gpu_spec = {"V100", "P100"};
  trace[1].name = "pod-a";
  auto w = make_workload("w", trace, cluster);
  ASSERT_TRUE(w) << w.error().to_string();
  ASSERT_EQ(w->pods.size(), 2u);
  EXPECT_EQ(w->pods[0].num_gpu, 0);  // pod-a
  EXPECT_EQ(w->pods[1].gpu_milli, 300);
  EXPECT_EQ(w->pods[1].allowed_models, ModelMask{1} << 1);
}

}  // namespace
}  // namespace cnlab::sim
