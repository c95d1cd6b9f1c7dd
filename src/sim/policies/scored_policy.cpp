#include "sim/policies/scored_policy.h"

namespace cnlab::sim {

std::optional<Choice> ScoredPolicy::place(const Pod& pod, const AllocCluster& cluster,
                                          std::span<const NodeIndex> feasible) {
  if (feasible.empty()) return std::nullopt;
  NodeIndex best = feasible[0];
  if (feasible.size() > 1) {
    scores_.resize(feasible.size());
    score_nodes(pod, cluster, feasible, scores_);
    int best_score = scores_[0];
    for (size_t i = 1; i < feasible.size(); ++i) {
      NodeIndex n = feasible[i];
      if (scores_[i] > best_score || (scores_[i] == best_score && cluster.rank(n) < cluster.rank(best))) {
        best = n;
        best_score = scores_[i];
      }
    }
  }
  return Choice{best, choose_gpus(pod, cluster, best)};
}

uint32_t ScoredPolicy::choose_gpus(const Pod& pod, const AllocCluster& cluster, NodeIndex node) {
  switch (pod.kind()) {
    case PodKind::kCpuOnly: return 0;
    case PodKind::kSharing: {
      int g = tightest_gpu(cluster, node, pod.gpu_milli);
      return g < 0 ? 0 : uint32_t{1} << g;
    }
    case PodKind::kWholeGpu: return lowest_free_gpus(cluster, node, pod.num_gpu);
  }
  return 0;
}

}  // namespace cnlab::sim
