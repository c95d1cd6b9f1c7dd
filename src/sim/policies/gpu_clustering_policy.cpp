#include "sim/policies/gpu_clustering_policy.h"

namespace cnlab::sim {

void GpuClusteringPolicy::reset(const AllocCluster& cluster, const RunContext& /*context*/) {
  tags_.assign(cluster.node_count(), 0);
}

uint32_t GpuClusteringPolicy::tag(const Pod& pod) {
  switch (pod.kind()) {
    case PodKind::kCpuOnly: return 0;
    case PodKind::kSharing: return 1;
    case PodKind::kWholeGpu: return uint32_t{1} << pod.num_gpu;
  }
  return 0;
}

void GpuClusteringPolicy::on_placed(const Pod& pod, const Choice& choice) {
  if (choice.node >= tags_.size()) tags_.resize(choice.node + 1, 0);
  tags_[choice.node] |= tag(pod);
}

int GpuClusteringPolicy::score(const Pod& pod, const AllocCluster& cluster, NodeIndex n) const {
  uint32_t mine = tag(pod);
  if (mine == 0) return 0;
  uint32_t present = n < tags_.size() ? tags_[n] : 0;
  int bonus = 0;
  if (present == mine) {
    bonus = 75;
  } else if (present & mine) {
    bonus = 50;
  } else if (present == 0) {
    bonus = 25;
  }
  // Integer division truncates as the spec's floor does for the non-negative values of nodes up
  // to 8 GPUs (and toward zero beyond, as the original's conversion to an integer does).
  return 25 * (8000 - cluster.gpu_free_total(n)) / 8000 + bonus;
}

void GpuClusteringPolicy::score_nodes(const Pod& pod, const AllocCluster& cluster,
                                      std::span<const NodeIndex> feasible, std::span<int> scores) {
  for (size_t i = 0; i < feasible.size(); ++i) scores[i] = score(pod, cluster, feasible[i]);
}

}  // namespace cnlab::sim
