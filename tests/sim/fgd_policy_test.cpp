// FGD's incremental scoring against a direct transcription of the definition, and its
// typical-pod distribution.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "shared_data.h"

#include <cmath>
#include <filesystem>

#include "sim/alloc_cluster.h"
#include "sim/openb_trace.h"
#include "sim/policies/fgd_policy.h"
#include "sim/rng.h"
#include "sim/typical_pods.h"

namespace cnlab::sim {
namespace {

// F(n) straight from the methodology, on an explicit node state.
double naive_fragmentation(const TypicalPods& typical, int model, int cpu_free, const std::vector<int>& free) {
  int total = 0;
  for (int f : free) total += f;
  double sum = 0;
  for (const TypicalPod& m : typical.types) {
    double p = static_cast<double>(m.count) / static_cast<double>(typical.kept_pods);
    double f = total;
    bool spec_ok = m.num_gpu == 0 || ((m.allowed_models >> model) & 1);
    if (m.num_gpu > 0 && spec_ok) {
      int fitting = 0, below = 0;
      for (int g : free) {
        if (g >= m.gpu_milli) {
          ++fitting;
        } else {
          below += g;
        }
      }
      if (fitting >= m.num_gpu && cpu_free >= m.cpu_milli) f = below;
    }
    sum += p * f;
  }
  return sum;
}

struct NaiveScore {
  int score = -1;
  int gpu = -1;
};

NaiveScore naive_score(const TypicalPods& typical, const AllocCluster& cluster, NodeIndex n, const Pod& pod) {
  std::vector<int> free(cluster.gpu_free(n).begin(), cluster.gpu_free(n).end());
  int model = cluster.model(n);
  double before = naive_fragmentation(typical, model, cluster.cpu_free(n), free);
  int cpu_after = cluster.cpu_free(n) - pod.cpu_milli;
  auto score = [&](const std::vector<int>& after) {
    double delta = before - naive_fragmentation(typical, model, cpu_after, after);
    return static_cast<int>(100.0 / (1.0 + std::exp(-delta / 1000.0)));
  };
  if (pod.kind() == PodKind::kSharing) {
    NaiveScore best;
    for (size_t g = 0; g < free.size(); ++g) {
      if (free[g] < pod.gpu_milli) continue;
      auto after = free;
      after[g] -= pod.gpu_milli;
      int s = score(after);
      if (s > best.score) best = {s, static_cast<int>(g)};
    }
    return best;
  }
  auto after = free;
  int left = pod.kind() == PodKind::kWholeGpu ? pod.num_gpu : 0;
  for (auto& f : after) {
    if (left > 0 && f == kGpuMilli) f = 0, --left;
  }
  return {score(after), -1};
}

TEST(FgdPolicy, IncrementalScoresEqualTheDefinitionOnRandomStates) {
  std::vector<OpenbNode> nodes;
  const char* models[] = {"T4", "V100", "A10"};
  const int gpus[] = {1, 2, 4, 8};
  for (int i = 0; i < 24; ++i) nodes.push_back({fmt::format("n{}", i), 16000 * (1 + i % 4), 1 << 20, gpus[i % 4], models[i % 3]});
  AllocCluster cluster = std::move(AllocCluster::build(nodes).value());

  // Shapes with CPU needs, specs and all three kinds, as in the real traces.
  TypicalPods typical;
  std::vector<std::string> v100 = {"V100"};
  typical.types = {{4000, 0, 0, "", kAnyModel, 30},
                   {6000, 460, 1, "", kAnyModel, 25},
                   {12000, 1000, 1, "", kAnyModel, 20},
                   {8000, 250, 1, "V100", cluster.model_mask(v100), 10},
                   {32000, 1000, 2, "", kAnyModel, 8},
                   {64000, 1000, 8, "", kAnyModel, 4},
                   {2000, 810, 1, "", kAnyModel, 3}};
  for (const auto& t : typical.types) typical.kept_pods += t.count;
  FgdPolicy fgd(typical);
  fgd.reset(cluster, RunContext{});

  Rng rng(2024);
  const int millis[] = {100, 250, 460, 500, 810, 1000};
  int compared = 0;
  for (int step = 0; step < 400; ++step) {
    Pod pod;
    pod.cpu_milli = static_cast<int32_t>(1000 * rng.below(12));
    pod.memory_mib = 1;
    int kind = static_cast<int>(rng.below(3));
    if (kind == 1) {
      pod.num_gpu = 1;
      pod.gpu_milli = millis[rng.below(6)];
    } else if (kind == 2) {
      pod.num_gpu = 1 + static_cast<int>(rng.below(2));
      pod.gpu_milli = kGpuMilli;
    }
    std::vector<NodeIndex> feasible;
    for (NodeIndex n = 0; n < cluster.node_count(); ++n) {
      if (!cluster.fits(pod, n)) continue;
      feasible.push_back(n);
      // Before and after the cache has seen this (node, shape).
      for (int twice = 0; twice < 2; ++twice) {
        auto got = fgd.evaluate(pod, cluster, n);
        auto want = naive_score(typical, cluster, n, pod);
        ASSERT_EQ(got.score, want.score) << "step " << step << " node " << n;
        ASSERT_EQ(got.gpu, want.gpu) << "step " << step << " node " << n;
        ++compared;
      }
      std::vector<int> free(cluster.gpu_free(n).begin(), cluster.gpu_free(n).end());
      ASSERT_NEAR(fgd.fragmentation(cluster, n), naive_fragmentation(typical, cluster.model(n), cluster.cpu_free(n), free),
                  1e-9);
    }
    if (feasible.empty()) continue;
    auto choice = fgd.place(pod, cluster, feasible);
    ASSERT_TRUE(choice);
    ASSERT_TRUE(cluster.apply(pod, *choice));
    fgd.on_placed(pod, *choice);
  }
  EXPECT_GT(compared, 1000);
}

TEST(TypicalPods, GroupsByShapeSortsByCountThenLargerKeyAndCutsAt95Percent) {
  std::vector<OpenbNode> nodes = {{"n0", 64000, 1 << 20, 2, "T4"}};
  AllocCluster cluster = std::move(AllocCluster::build(nodes).value());
  auto pod = [](int cpu, int mem, int gpus, int milli, std::vector<std::string> spec = {}) {
    OpenbPod p;
    p.cpu_milli = cpu;
    p.memory_mib = mem;
    p.num_gpu = gpus;
    p.gpu_milli = milli;
    p.gpu_spec = std::move(spec);
    return p;
  };
  std::vector<OpenbPod> trace;
  // 40 x (4000, 500, 1): memory differs but is not a key.
  for (int i = 0; i < 40; ++i) trace.push_back(pod(4000, 100 + i, 1, 500));
  // 30 x (8000, 1000, 1) and 30 x (2000, 0, 0): tied counts, the larger key first -> (8000, ...).
  for (int i = 0; i < 30; ++i) trace.push_back(pod(2000, 1, 0, 0));
  for (int i = 0; i < 30; ++i) trace.push_back(pod(8000, 1, 1, 1000));
  // 4 + 1 rare ones; 100 of 105 pods = 95.2% are covered by the first three.
  for (int i = 0; i < 4; ++i) trace.push_back(pod(4000, 1, 1, 500, {"T4"}));
  trace.push_back(pod(1000, 1, 1, 100));

  TypicalPods t = typical_pods(trace, cluster);
  EXPECT_EQ(t.total_pods, 105);
  EXPECT_EQ(t.total_types, 5u);
  ASSERT_EQ(t.types.size(), 3u);
  EXPECT_EQ(t.types[0].cpu_milli, 4000);
  EXPECT_EQ(t.types[0].count, 40);
  EXPECT_EQ(t.types[1].cpu_milli, 8000);
  EXPECT_EQ(t.types[2].cpu_milli, 2000);
  EXPECT_EQ(t.kept_pods, 100);
}

TEST(TypicalPods, DefaultTraceKeeps35Of91Shapes) {
  CNLAB_SKIP_WITHOUT_OPENB_TRACE();
  auto nodes = load_openb_nodes(testing::openb_path("openb_node_list_gpu_node.csv"));
  auto pods = load_openb_pods(testing::openb_path("openb_pod_list_default.csv"));
  ASSERT_TRUE(nodes && pods);
  AllocCluster cluster = std::move(AllocCluster::build(*nodes).value());
  TypicalPods t = typical_pods(*pods, cluster);
  EXPECT_EQ(t.total_types, 91u);
  EXPECT_EQ(t.types.size(), 35u);
  EXPECT_GE(t.kept_pods * 100, t.total_pods * 95);
}

}  // namespace
}  // namespace cnlab::sim
