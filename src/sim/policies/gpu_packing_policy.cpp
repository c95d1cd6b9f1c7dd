#include "sim/policies/gpu_packing_policy.h"

#include <algorithm>
#include <array>

namespace cnlab::sim {

int GpuPackingPolicy::score(const Pod& pod, const AllocCluster& cluster, NodeIndex n) {
  if (pod.kind() == PodKind::kCpuOnly) return 0;
  int gpus = cluster.gpu_count(n);
  if (cluster.fully_free_gpus(n) == gpus) return 33 - gpus;

  auto free = cluster.gpu_free(n);
  std::array<uint8_t, kMaxGpusPerNode> order{};
  for (int g = 0; g < gpus; ++g) order[static_cast<size_t>(g)] = static_cast<uint8_t>(g);
  std::stable_sort(order.begin(), order.begin() + gpus, [&](uint8_t a, uint8_t b) { return free[a] < free[b]; });
  int taken = 0, fully_free_taken = 0, percent_sum = 0;
  for (int i = 0; i < gpus && taken < pod.num_gpu; ++i) {
    int f = free[order[static_cast<size_t>(i)]];
    if (f < pod.gpu_milli) continue;
    ++taken;
    fully_free_taken += f == kGpuMilli;
    percent_sum += f * 100 / kGpuMilli;
  }
  if (fully_free_taken > 0) return std::max(50 - fully_free_taken, 33);
  return std::max(100 - percent_sum / 10, 50);
}

void GpuPackingPolicy::score_nodes(const Pod& pod, const AllocCluster& cluster, std::span<const NodeIndex> feasible,
                                   std::span<int> scores) {
  for (size_t i = 0; i < feasible.size(); ++i) scores[i] = score(pod, cluster, feasible[i]);
}

}  // namespace cnlab::sim
