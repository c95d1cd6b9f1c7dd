#include "sim/policies/best_fit_policy.h"

#include <algorithm>

namespace cnlab::sim {

int BestFitPolicy::raw_score(const Pod& pod, const AllocCluster& cluster, NodeIndex n) {
  // Exact in integers: 100*(1 - a/256000 - b/16000) = (25600000 - 100a - 1600b) / 256000 with
  // a = cL - cpu and b = gL - rg; C++ division truncates toward zero as the spec's truncation does.
  int64_t cpu_left = int64_t{cluster.cpu_free(n)} - pod.cpu_milli;
  int64_t gpu_left = int64_t{cluster.gpu_free_total(n)} - pod.gpu_request();
  return static_cast<int>((25'600'000 - 100 * cpu_left - 1600 * gpu_left) / 256'000);
}

void BestFitPolicy::score_nodes(const Pod& pod, const AllocCluster& cluster, std::span<const NodeIndex> feasible,
                                std::span<int> scores) {
  int lo = 0, hi = 0;
  for (size_t i = 0; i < feasible.size(); ++i) {
    scores[i] = raw_score(pod, cluster, feasible[i]);
    lo = i == 0 ? scores[i] : std::min(lo, scores[i]);
    hi = i == 0 ? scores[i] : std::max(hi, scores[i]);
  }
  for (int& s : scores) s = hi == lo ? 0 : static_cast<int>(int64_t{s - lo} * 100 / (hi - lo));
}

}  // namespace cnlab::sim
