// A workload of the allocation experiment and the pod sequence of one run (shuffle and tuning).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/common.h"
#include "sim/alloc_cluster.h"
#include "sim/openb_trace.h"
#include "sim/typical_pods.h"

namespace cnlab::sim {

struct Workload {
  std::string name;       // the pod file's name without ".csv", e.g. "openb_pod_list_default"
  std::vector<Pod> pods;  // the trace sorted by pod name: the "unshuffled trace"
  TypicalPods typical;    // FGD's distribution, from every row of the trace
};

// Converts the trace for `cluster` (GPU specs become model masks). Fails when a pod asks for more
// GPUs than kMaxGpusPerNode or has values the engine cannot hold.
Result<Workload> make_workload(std::string name, std::span<const OpenbPod> trace, const AllocCluster& cluster);

struct RunPlan {
  std::vector<uint32_t> order;  // indexes into Workload::pods in arrival order; tuning repeats some
  std::vector<uint32_t> ranks;  // ranks[node], a permutation: the tie-break order of the run
};

// The methodology's steps 1-3 for one seed, all from one Rng(seed):
//  1. shuffle the sorted trace;
//  2. tune to `tune_percent` % of `gpu_capacity` (C): with R = sum of num_gpu*gpu_milli and
//     T = tune_percent % of C,
//     - if R < T, draw pods uniformly with replacement from the unshuffled trace and append them
//       until the next draw would push R past T, judged by that pod's per-GPU milli rather than
//       num_gpu*gpu_milli (the original simulator's quirk, kept so results compare; the appended
//       pod adds its full request, so R may end slightly above T);
//     - if R > T, remove uniformly chosen pods until R <= T;
//  3. draw a uniformly random permutation of the nodes as ranks.
// A trace without GPU demand is not tuned (no draw could ever reach T).
RunPlan make_run_plan(std::span<const Pod> pods, size_t node_count, int64_t gpu_capacity, uint64_t seed,
                      int tune_percent);

}  // namespace cnlab::sim
