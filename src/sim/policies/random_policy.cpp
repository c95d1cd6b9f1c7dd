#include "sim/policies/random_policy.h"

namespace cnlab::sim {
namespace {

// Distinguishes this policy's stream from the workload's (which uses Rng(seed) directly).
constexpr uint64_t kRandomPolicyStream = 1;

}  // namespace

void RandomPolicy::reset(const AllocCluster& /*cluster*/, const RunContext& context) {
  rng_.emplace(context.seed, kRandomPolicyStream);
}

std::optional<Choice> RandomPolicy::place(const Pod& pod, const AllocCluster& cluster,
                                          std::span<const NodeIndex> feasible) {
  if (feasible.empty()) return std::nullopt;
  if (!rng_) rng_.emplace(0, kRandomPolicyStream);
  NodeIndex node = feasible.size() == 1 ? feasible[0] : feasible[rng_->below(feasible.size())];
  Choice choice{node, 0};
  if (pod.kind() == PodKind::kSharing) {
    auto free = cluster.gpu_free(node);
    uint64_t candidates = 0;
    for (int16_t f : free) candidates += f >= pod.gpu_milli;
    uint64_t pick = rng_->below(candidates);
    for (size_t g = 0; g < free.size(); ++g) {
      if (free[g] >= pod.gpu_milli && pick-- == 0) {
        choice.gpus = uint32_t{1} << g;
        break;
      }
    }
  } else if (pod.kind() == PodKind::kWholeGpu) {
    choice.gpus = lowest_free_gpus(cluster, node, pod.num_gpu);
  }
  return choice;
}

}  // namespace cnlab::sim
