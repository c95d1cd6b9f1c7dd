#include "sim/policies/dot_prod_policy.h"

#include <algorithm>

namespace cnlab::sim {

int DotProdPolicy::score(const Pod& pod, const AllocCluster& cluster, NodeIndex n) {
  // Exact in integers: 128000^2 = 256 * 8000^2, so the bracket is
  // (cL*cpu + 256*gL*rg) / 128000^2 and the score truncates
  // (100*128000^2 - 50*(cL*cpu + 256*gL*rg)) / 128000^2. 128-bit because a large node times a
  // large pod can pass 2^63 after the factor 50.
  constexpr __int128 kDenominator = __int128{128000} * 128000;
  __int128 dot = __int128{cluster.cpu_free(n)} * pod.cpu_milli +
                 __int128{256} * cluster.gpu_free_total(n) * pod.gpu_request();
  auto value = static_cast<int64_t>((100 * kDenominator - 50 * dot) / kDenominator);
  // Only nodes or pods beyond the normalisers leave [0, 100]; the framework's range holds anyway.
  return static_cast<int>(std::clamp<int64_t>(value, 0, 100));
}

void DotProdPolicy::score_nodes(const Pod& pod, const AllocCluster& cluster, std::span<const NodeIndex> feasible,
                                std::span<int> scores) {
  for (size_t i = 0; i < feasible.size(); ++i) scores[i] = score(pod, cluster, feasible[i]);
}

}  // namespace cnlab::sim
