#include "sim/alloc_experiment.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "sim/alloc_leftovers.h"
#include "sim/alloc_measure.h"
#include "sim/alloc_run.h"

namespace cnlab::sim {
namespace {

// A small heterogeneous cluster and a trace with every pod kind, a spec and a pod too big to fit.
struct Fixture {
  AllocCluster cluster;
  Workload workload;
};

Fixture small_world() {
  std::vector<OpenbNode> nodes;
  const char* models[] = {"T4", "V100", "G2"};
  const int gpus[] = {1, 2, 4, 8};
  for (int i = 0; i < 12; ++i) {
    nodes.push_back({fmt::format("node-{}", i), 32000 + 16000 * (i % 3), 1 << 18, gpus[i % 4], models[i % 3]});
  }
  Fixture f{std::move(AllocCluster::build(nodes).value()), {}};
  std::vector<OpenbPod> trace;
  const int millis[] = {1000, 460, 810, 250, 1000, 500};
  for (int i = 0; i < 60; ++i) {
    OpenbPod p;
    p.name = fmt::format("pod-{}", 100 + i);
    p.cpu_milli = 2000 + 1000 * (i % 7);
    p.memory_mib = 1024;
    if (i % 5 == 0) {
      p.num_gpu = 0;
    } else if (i % 11 == 0) {
      p.num_gpu = 2 + i % 3 * 2;
      p.gpu_milli = 1000;
    } else {
      p.num_gpu = 1;
      p.gpu_milli = millis[i % 6];
    }
    if (i % 9 == 1) p.gpu_spec = {"V100"};
    trace.push_back(p);
  }
  OpenbPod huge;
  huge.name = "pod-999";
  huge.cpu_milli = 500000;
  trace.push_back(huge);
  f.workload = std::move(make_workload("small", trace, f.cluster).value());
  return f;
}

ExperimentSpec spec_for(const Fixture& f, int threads) {
  ExperimentSpec spec;
  spec.workloads = {f.workload};
  spec.policies = baseline_policy_keys();
  spec.seeds = {1, 2, 3};
  spec.threads = threads;
  return spec;
}

TEST(AllocExperiment, ResultsDoNotDependOnTheNumberOfThreads) {
  Fixture f = small_world();
  PolicyRegistry registry = PolicyRegistry::with_baselines();
  auto one = run_experiment(f.cluster, spec_for(f, 1), registry);
  auto two = run_experiment(f.cluster, spec_for(f, 2), registry);
  ASSERT_TRUE(one) << one.error().to_string();
  ASSERT_TRUE(two) << two.error().to_string();
  ASSERT_EQ(one->curves.size(), 6u);
  for (size_t i = 0; i < one->curves.size(); ++i) {
    EXPECT_EQ(one->curves[i].policy, two->curves[i].policy);
    EXPECT_EQ(one->curves[i].mean, two->curves[i].mean) << one->curves[i].policy;
    for (size_t s = 0; s < 3; ++s) {
      EXPECT_EQ(one->curves[i].runs[s].result.curve, two->curves[i].runs[s].result.curve);
      EXPECT_EQ(one->curves[i].runs[s].result.placed, two->curves[i].runs[s].result.placed);
    }
  }
  EXPECT_EQ(one->curves[0].policy, "Random");
  EXPECT_EQ(one->curves[5].policy, "FGD");
}

TEST(AllocExperiment, ProgressIsReportedForEveryRun) {
  Fixture f = small_world();
  ExperimentSpec spec = spec_for(f, 2);
  size_t last = 0, calls = 0;
  spec.progress = [&](size_t done, size_t total) {
    EXPECT_EQ(total, 18u);
    EXPECT_GT(done, last);
    last = done;
    ++calls;
  };
  ASSERT_TRUE(run_experiment(f.cluster, spec, PolicyRegistry::with_baselines()));
  EXPECT_EQ(last, 18u);
  EXPECT_GE(calls, 1u);
}

TEST(AllocRun, CountsFailedPodsInArrivedDemandAndRecordsEveryEvent) {
  Fixture f = small_world();
  RunPlan plan = make_run_plan(f.workload.pods, f.cluster.node_count(), f.cluster.gpu_capacity_total(), 5, 130);
  auto policy = make_baseline_policy("bestfit", f.workload.typical);
  ASSERT_TRUE(policy);
  AllocCluster cluster = f.cluster;
  auto result = run_allocation(cluster, f.workload, plan, **policy, RunContext{"small", 5, 130});
  ASSERT_TRUE(result) << result.error().to_string();
  EXPECT_EQ(result->pods, static_cast<int64_t>(plan.order.size()));
  EXPECT_EQ(result->placed + result->failed, result->pods);
  EXPECT_GE(result->failed, 1);  // at least the huge CPU pod
  int64_t demand = 0;
  for (uint32_t i : plan.order) demand += f.workload.pods[i].gpu_request();
  EXPECT_EQ(result->arrived_gpu_milli, demand);
  EXPECT_LE(result->allocated_gpu_milli, f.cluster.gpu_capacity_total());
  EXPECT_EQ(result->allocated_gpu_milli, cluster.gpu_allocated_total());
  ASSERT_EQ(result->curve.size(), 131u);
  // On 45 GPUs one pod moves arrived demand by up to 13%, so some buckets stay empty; the rest
  // never exceed the capacity.
  int filled = 0;
  for (int64_t y : result->curve) {
    if (y == kNoValue) continue;
    ++filled;
    EXPECT_LE(y, 10000);
  }
  EXPECT_GE(filled, 20);
}

// Records what it was shown and places like a trivial first-fit; a stand-in for CNLab's policy.
class RecordingPolicy : public AllocPolicy {
 public:
  explicit RecordingPolicy(std::vector<std::vector<int32_t>>* log) : log_(log) {}
  std::string_view name() const override { return "Recorder"; }
  void reset(const AllocCluster&, const RunContext&) override { log_->emplace_back(); }
  std::optional<Choice> place(const Pod& pod, const AllocCluster& cluster,
                              std::span<const NodeIndex> feasible) override {
    log_->back().push_back(pod.cpu_milli * 10000 + pod.gpu_milli);
    NodeIndex n = feasible[0];
    uint32_t gpus = pod.kind() == PodKind::kSharing    ? uint32_t{1} << tightest_gpu(cluster, n, pod.gpu_milli)
                    : pod.kind() == PodKind::kWholeGpu ? lowest_free_gpus(cluster, n, pod.num_gpu)
                                                       : 0;
    return Choice{n, gpus};
  }

 private:
  std::vector<std::vector<int32_t>>* log_;
};

TEST(AllocExperiment, APluggedInPolicyRunsBesideTheBaselinesAndEveryPolicySeesTheSamePods) {
  Fixture f = small_world();
  std::vector<std::vector<int32_t>> first, second;
  PolicyRegistry registry = PolicyRegistry::with_baselines();
  ASSERT_TRUE(registry.add("rec-a", [&] { return std::make_unique<RecordingPolicy>(&first); }));
  ASSERT_TRUE(registry.add("rec-b", [&] { return std::make_unique<RecordingPolicy>(&second); }));
  ExperimentSpec spec = spec_for(f, 1);
  spec.policies = {"bestfit", "rec-a", "rec-b"};
  spec.seeds = {9};
  auto result = run_experiment(f.cluster, spec, registry);
  ASSERT_TRUE(result) << result.error().to_string();
  // The factory ran once up front for the name, then once per run.
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(first[0], second[0]);
  EXPECT_FALSE(first[0].empty());
  EXPECT_EQ(result->curves[1].policy, "Recorder");
}

class BrokenPolicy : public AllocPolicy {
 public:
  std::string_view name() const override { return "Broken"; }
  std::optional<Choice> place(const Pod&, const AllocCluster&, std::span<const NodeIndex> feasible) override {
    return Choice{feasible[0], 0xFFFF};  // GPUs it cannot have
  }
};

TEST(AllocExperiment, AnInvalidChoiceEndsTheRunWithAnErrorNamingThePolicy) {
  Fixture f = small_world();
  PolicyRegistry registry;
  ASSERT_TRUE(registry.add("broken", [] { return std::make_unique<BrokenPolicy>(); }));
  ExperimentSpec spec = spec_for(f, 2);
  spec.policies = {"broken"};
  auto result = run_experiment(f.cluster, spec, registry);
  ASSERT_FALSE(result);
  EXPECT_NE(result.error().message.find("policy Broken"), std::string::npos) << result.error().message;
}

TEST(AllocExperiment, UnknownPolicyKeyFailsBeforeAnyRun) {
  Fixture f = small_world();
  ExperimentSpec spec = spec_for(f, 1);
  spec.policies = {"bestfit", "tetris"};
  auto result = run_experiment(f.cluster, spec, PolicyRegistry::with_baselines());
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().value, "tetris");
}

}  // namespace
}  // namespace cnlab::sim

namespace cnlab::sim {
namespace {

TEST(AllocLeftovers, FreeCapacityIsAccountedForExactlyOnce) {
  Fixture f = small_world();
  RunPlan plan = make_run_plan(f.workload.pods, f.cluster.node_count(), f.cluster.gpu_capacity_total(), 5, 130);
  auto policy = make_baseline_policy("bestfit", f.workload.typical);
  ASSERT_TRUE(policy);
  AllocCluster cluster = f.cluster;
  auto r = run_allocation(cluster, f.workload, plan, **policy, RunContext{"small", 5, 130});
  ASSERT_TRUE(r) << r.error().to_string();
  const Leftovers& l = r->leftovers;
  EXPECT_EQ(l.capacity, f.cluster.gpu_capacity_total());
  EXPECT_EQ(r->allocated_gpu_milli + l.on_partly_used_gpus + l.behind_used_up_cpu + l.idle_elsewhere, l.capacity);
  int64_t partly = 0, gpus = 0;
  for (const auto& [free, count] : l.partly_used_gpus_by_free) {
    EXPECT_GT(free, 0);
    EXPECT_LT(free, kGpuMilli);
    partly += free * count;
    gpus += count;
  }
  EXPECT_EQ(partly, l.on_partly_used_gpus);
  EXPECT_GT(gpus, 0) << "the fixture leaves some GPU partly used";
  for (const auto& [milli, placed] : l.placed_by_milli) EXPECT_LE(placed, l.arrived_by_milli.at(milli));
}

TEST(AllocLeftovers, CsvAndMarkdownReportTheMeans) {
  Fixture f = small_world();
  ExperimentSpec spec = spec_for(f, 1);
  spec.policies = {"bestfit"};
  auto result = run_experiment(f.cluster, spec, PolicyRegistry::with_baselines());
  ASSERT_TRUE(result);
  std::string csv = leftovers_csv(*result);
  EXPECT_EQ(csv.rfind("workload,policy,seeds,measure,key,mean\n", 0), 0u);
  EXPECT_NE(csv.find("small,BestFit,3,free_on_partly_used_gpus,,"), std::string::npos);
  EXPECT_NE(csv.find("small,BestFit,3,placed_by_milli,1000,"), std::string::npos);
  EXPECT_NE(leftovers_markdown(*result).find("| BestFit |"), std::string::npos);
}

}  // namespace
}  // namespace cnlab::sim
