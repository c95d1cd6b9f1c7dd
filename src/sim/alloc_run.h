// One run of the allocation experiment: one workload, one policy, one seed.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "common/common.h"
#include "sim/alloc_cluster.h"
#include "sim/alloc_migration.h"
#include "sim/alloc_policy.h"
#include "sim/alloc_workload.h"

namespace cnlab::sim {

// Where the GPU capacity left free at the end of a run sits, in milli, and which pod sizes came and
// went: what explains a policy's allocation (leftovers.csv).
struct Leftovers {
  int64_t capacity = 0;             // the cluster's GPU milli
  int64_t on_partly_used_gpus = 0;  // free milli on GPUs that hold a pod
  int64_t behind_used_up_cpu = 0;   // idle GPUs on nodes with less free CPU than any GPU pod asked
  int64_t idle_elsewhere = 0;       // idle GPUs on nodes that still have that much CPU
  std::map<int, int64_t> partly_used_gpus_by_free;  // free milli -> GPUs holding a pod with that much free
  std::map<int, int64_t> arrived_by_milli;          // per-GPU milli -> GPU pods that arrived
  std::map<int, int64_t> placed_by_milli;           // per-GPU milli -> GPU pods placed
};

struct RunResult {
  // Allocated GPU capacity (% in hundredths) at arrived demand 0..tune_percent % (see
  // CurveRecorder); kNoValue where no event fell near that percent.
  std::vector<int64_t> curve;
  int64_t pods = 0;    // arrived, tuning copies included
  int64_t placed = 0;  // GPU and CPU-only pods placed
  int64_t failed = 0;  // pods that fit nowhere (or that the policy declined)
  int64_t arrived_gpu_milli = 0;
  int64_t allocated_gpu_milli = 0;
  // With migrations: pods placed because others moved to make room, and the moves that took.
  int64_t placed_by_moving = 0;
  int64_t moves = 0;
  Leftovers leftovers;
};

// Places the pods of `plan.order` one at a time on `cluster` (emptied and given plan.ranks first):
// filter, policy.place(), apply; no departures, retries or preemption. With `migrations`, a GPU pod
// that fits nowhere may be placed by moving placed pods (alloc_migration.h). After every pod,
// placed or not, it records the arrived demand and the allocated GPU milli. Fails only when the
// policy makes an invalid choice (a bug in the policy), naming the policy.
Result<RunResult> run_allocation(AllocCluster& cluster, const Workload& workload, const RunPlan& plan,
                                 AllocPolicy& policy, const RunContext& context,
                                 const std::optional<MigrationLimits>& migrations = std::nullopt);

}  // namespace cnlab::sim
