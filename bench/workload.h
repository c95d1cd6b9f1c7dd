// Synthetic clusters and workloads for the scheduler benchmarks: the shapes a shared GPU cluster
// sees (1%-block slices to 8-GPU gangs, MIG instances), several tiers, teams and estimates.
#pragma once

#include <random>
#include <string>

#include "sched/scheduler.h"

namespace cnlab::bench {

struct WorkloadSpec {
  int nodes = 4000;       // 8 GPUs each
  int jobs_per_node = 35;  // running + pending: 140,000 at 4,000 nodes
  uint64_t seed = 42;
};

// A cluster of `spec.nodes` 8-GPU nodes (80% h100, 15% a100m80, 5% h200; one GPU in 16 in MIG
// mode) and jobs_per_node * nodes jobs. A first cycle on the empty cluster starts what fits; those
// jobs are then running, the rest pending, and the clock moves one minute on.
sched::Snapshot loaded_cluster(const WorkloadSpec& spec);

// The same cluster, empty, with `jobs` pending jobs (for sustained placement): block slices only
// when `blocks_only`, else the full mix (whole GPUs, gangs, MIG instances too).
sched::Snapshot empty_cluster_with_pending_jobs(int nodes, int jobs, bool blocks_only, uint64_t seed);

}  // namespace cnlab::bench
