#include "sim/alloc_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>

#include "sim/alloc_measure.h"

namespace cnlab::sim {

Result<RunResult> run_allocation(AllocCluster& cluster, const Workload& workload, const RunPlan& plan,
                                 AllocPolicy& policy, const RunContext& context,
                                 const std::optional<MigrationLimits>& migrations) {
  if (cluster.gpu_capacity_total() <= 0) {
    return Error::invalid_argument("nodes", "0 GPUs", "the allocation experiment needs a cluster with GPUs");
  }
  cluster.reset(plan.ranks);
  policy.reset(cluster, context);
  RunResult result;
  CurveRecorder recorder(cluster.gpu_capacity_total(), context.tune_percent);
  std::vector<NodeIndex> feasible;
  feasible.reserve(cluster.node_count());
  const auto node_count = static_cast<NodeIndex>(cluster.node_count());

  Leftovers& left = result.leftovers;
  left.capacity = cluster.gpu_capacity_total();
  int32_t least_gpu_pod_cpu = INT32_MAX;
  Placements placements(migrations ? cluster.node_count() : 0);
  for (uint32_t index : plan.order) {
    const Pod& pod = workload.pods[index];
    ++result.pods;
    if (pod.num_gpu > 0) {
      ++left.arrived_by_milli[pod.gpu_milli];
      least_gpu_pod_cpu = std::min(least_gpu_pod_cpu, pod.cpu_milli);
    }
    result.arrived_gpu_milli += pod.gpu_request();
    policy.on_arrival(pod);
    feasible.clear();
    for (NodeIndex n = 0; n < node_count; ++n) {
      if (cluster.fits(pod, n)) feasible.push_back(n);
    }
    std::optional<Choice> choice;
    if (!feasible.empty()) choice = policy.place(pod, cluster, feasible);
    if (choice) {
      if (auto applied = cluster.apply(pod, *choice); !applied) {
        Error e = applied.error();
        e.message = fmt::format("policy {} on {} seed {}: {}", policy.name(), context.workload, context.seed, e.message);
        return e;
      }
      policy.on_placed(pod, *choice);
      if (migrations) placements.add(pod, *choice);
      ++result.placed;
      if (pod.num_gpu > 0) ++left.placed_by_milli[pod.gpu_milli];
    } else if (auto moved = migrations ? migrate_to_place(pod, cluster, policy, placements, *migrations) : std::nullopt) {
      ++result.placed;
      ++result.placed_by_moving;
      result.moves += *moved;
      if (pod.num_gpu > 0) ++left.placed_by_milli[pod.gpu_milli];
    } else {
      ++result.failed;
    }
    recorder.record(result.arrived_gpu_milli, cluster.gpu_allocated_total());
  }
  result.allocated_gpu_milli = cluster.gpu_allocated_total();
  for (NodeIndex n = 0; n < node_count; ++n) {
    for (int16_t free : cluster.gpu_free(n)) {
      if (free == 0) continue;
      if (free < kGpuMilli) {
        left.on_partly_used_gpus += free;
        ++left.partly_used_gpus_by_free[free];
      } else if (cluster.cpu_free(n) < least_gpu_pod_cpu) {
        left.behind_used_up_cpu += free;
      } else {
        left.idle_elsewhere += free;
      }
    }
  }
  result.curve = recorder.curve();
  return result;
}

}  // namespace cnlab::sim
