// The allocation experiment's matrix: workloads x policies x seeds, run on a small thread pool.
// Each run gets its own cluster copy and policy instance, and its result lands in a slot fixed by
// its (workload, policy, seed) index, so results do not depend on the number of threads.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/common.h"
#include "sim/alloc_ceiling.h"
#include "sim/alloc_cluster.h"
#include "sim/alloc_run.h"
#include "sim/alloc_workload.h"
#include "sim/policy_registry.h"

namespace cnlab::sim {

struct ExperimentSpec {
  std::vector<Workload> workloads;
  std::vector<std::string> policies;  // registry keys
  std::vector<uint64_t> seeds;
  int tune_percent = 130;
  int threads = 1;
  std::optional<MigrationLimits> migrations;  // `--migrations`: placed pods may move to make room
  // Called on the calling thread after each finished run: (runs done, runs in all).
  std::function<void(size_t, size_t)> progress;
};

struct SeedRun {
  uint64_t seed = 0;
  RunResult result;
  double seconds = 0;  // wall time of this run alone
};

struct PolicyCurve {
  std::string workload;
  std::string policy;         // the policy's name(), e.g. "BestFit"
  std::vector<SeedRun> runs;  // in seed order
  std::vector<int64_t> mean;  // mean over the seeds, hundredths (see mean_curve)
};

// What no policy that places every pod that fits can exceed, per seed (see alloc_ceiling.h).
struct WorkloadCeiling {
  std::string workload;
  std::vector<AllocationCeiling> per_seed;  // in seed order
};

struct ExperimentResult {
  std::vector<PolicyCurve> curves;        // workload-major, then policy, in the spec's order
  std::vector<WorkloadCeiling> ceilings;  // in the spec's workload order
  int tune_percent = 130;
  double wall_seconds = 0;
};

// Fails before running anything when a key is unknown or a list is empty, and otherwise with the
// first failed run's error (in matrix order).
Result<ExperimentResult> run_experiment(const AllocCluster& cluster, const ExperimentSpec& spec,
                                        const PolicyRegistry& registry);

}  // namespace cnlab::sim
