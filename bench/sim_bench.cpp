// One run of the allocation experiment (default openb workload, seed 42, ~11k pods on 1,213 nodes)
// per policy (the six baselines and CNLab). Latest numbers: docs/benchmarks/packing.md.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <optional>

#include "sim/alloc_run.h"
#include "sim/openb_trace.h"
#include "sim/policy_registry.h"

namespace cnlab::sim {
namespace {

struct World {
  AllocCluster cluster;
  Workload workload;
  RunPlan plan;
};

// Loaded once; nullopt (and every benchmark skipped) when the shared data is absent.
const std::optional<World>& world() {
  static const std::optional<World> loaded = []() -> std::optional<World> {
    const std::string dir = std::string(CNLAB_SHARED_DATA) + "/alibaba-openb-2023";
    auto nodes = load_openb_nodes(dir + "/openb_node_list_gpu_node.csv");
    auto pods = load_openb_pods(dir + "/openb_pod_list_default.csv");
    if (!nodes || !pods) return std::nullopt;
    auto cluster = AllocCluster::build(*nodes);
    if (!cluster) return std::nullopt;
    auto workload = make_workload("openb_pod_list_default", *pods, *cluster);
    if (!workload) return std::nullopt;
    RunPlan plan = make_run_plan(workload->pods, cluster->node_count(), cluster->gpu_capacity_total(), 42, 130);
    return World{std::move(*cluster), std::move(*workload), std::move(plan)};
  }();
  return loaded;
}

void BM_AllocRun(benchmark::State& state, const std::string& key) {
  if (!world()) {
    state.SkipWithError("shared data not found; set -DCNLAB_SHARED_DATA to the directory of alibaba-openb-2023/");
    return;
  }
  AllocCluster cluster = world()->cluster;
  int64_t pods = 0;
  const PolicyRegistry registry = default_policies();
  for (auto _ : state) {
    auto policy = registry.make(key, world()->workload);
    auto result = run_allocation(cluster, world()->workload, world()->plan, **policy, RunContext{"default", 42, 130});
    if (!result) {
      state.SkipWithError(result.error().to_string().c_str());
      return;
    }
    pods = result->pods;
    benchmark::DoNotOptimize(result->allocated_gpu_milli);
  }
  state.counters["pods"] = static_cast<double>(pods);
  state.counters["pods/s"] = benchmark::Counter(static_cast<double>(pods), benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK_CAPTURE(BM_AllocRun, random, std::string("random"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AllocRun, dotprod, std::string("dotprod"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AllocRun, gpuclustering, std::string("gpuclustering"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AllocRun, gpupacking, std::string("gpupacking"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AllocRun, bestfit, std::string("bestfit"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AllocRun, fgd, std::string("fgd"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AllocRun, cnlab, std::string("cnlab"))->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace cnlab::sim

BENCHMARK_MAIN();
