// Scheduler benchmarks: one full cycle at cluster sizes from 100 to 4,000 nodes, and sustained
// placement throughput. Run one case with --benchmark_filter, e.g. 'Cycle/nodes:4000'.
#include <benchmark/benchmark.h>

#include <map>

#include "workload.h"

namespace cnlab::bench {
namespace {

const sched::Snapshot& cached_loaded(int nodes) {
  static std::map<int, sched::Snapshot> cache;
  auto it = cache.find(nodes);
  if (it == cache.end()) it = cache.emplace(nodes, loaded_cluster({nodes, 35, 42})).first;
  return it->second;
}

// A full cycle: 8 GPUs and 35 jobs (running + pending) per node, the cluster already full.
void BM_Cycle(benchmark::State& state) {
  const sched::Snapshot& s = cached_loaded(static_cast<int>(state.range(0)));
  sched::PolicyConfig config;
  size_t running = 0;
  for (const auto& j : s.jobs) running += j.status.phase == model::JobPhase::kRunning ? 1 : 0;
  sched::CycleResult last;
  for (auto _ : state) {
    last = sched::run_cycle(s, config);
    benchmark::DoNotOptimize(last);
  }
  state.counters["gpus"] = static_cast<double>(s.nodes.size() * 8);
  state.counters["jobs"] = static_cast<double>(s.jobs.size());
  state.counters["running"] = static_cast<double>(running);
  state.counters["placed"] = static_cast<double>(last.placements.size());
  state.counters["preempted"] = static_cast<double>(last.preemptions.size());
  state.counters["reserved"] = static_cast<double>(last.reservations.size());
  state.counters["waiting"] = static_cast<double>(last.waiting.size());
  state.counters["searches"] = static_cast<double>(last.stats.placement_attempts);
}
BENCHMARK(BM_Cycle)->ArgName("nodes")->Arg(100)->Arg(250)->Arg(500)->Arg(1000)->Arg(2000)->Arg(4000)
    ->Unit(benchmark::kMillisecond)->UseRealTime();

// Sustained placement: an empty 4,000-node cluster and a queue of pending jobs, placed in one cycle
// (block slices only: 100,000 jobs; the full mix with gangs: 25,000 jobs, about 90% of the GPUs).
void sustained(benchmark::State& state, const sched::Snapshot& s) {
  size_t placed = 0;
  for (auto _ : state) {
    auto r = sched::run_cycle(s, {});
    placed = r.placements.size();
    benchmark::DoNotOptimize(r);
  }
  state.counters["jobs"] = static_cast<double>(s.jobs.size());
  state.counters["placed"] = static_cast<double>(placed);
  state.counters["jobs_per_s"] =
      benchmark::Counter(static_cast<double>(placed) * state.iterations(), benchmark::Counter::kIsRate);
}

void BM_SustainedPlacement(benchmark::State& state) {
  static const sched::Snapshot s = empty_cluster_with_pending_jobs(static_cast<int>(state.range(0)), 100000, true, 7);
  sustained(state, s);
}
BENCHMARK(BM_SustainedPlacement)->ArgName("nodes")->Arg(4000)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_SustainedPlacementMixed(benchmark::State& state) {
  static const sched::Snapshot s = empty_cluster_with_pending_jobs(static_cast<int>(state.range(0)), 25000, false, 7);
  sustained(state, s);
}
BENCHMARK(BM_SustainedPlacementMixed)->ArgName("nodes")->Arg(4000)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace cnlab::bench

BENCHMARK_MAIN();
