// GpuPacking: fills partly used GPUs first, then partly used nodes, and opens empty nodes last.
// A CPU-only pod scores 0. On a node whose GPUs are all fully free: 33 - G (G its GPU count).
// Otherwise walk the GPUs by increasing free milli (stable by index) and take those with
// free >= gpu_milli until num_gpu are taken: when any taken GPU is fully free the score is
// max(50 - number of fully free GPUs taken, 33), else max(100 - floor(sum(floor(free*100/1000))/10), 50).
#pragma once

#include "sim/policies/scored_policy.h"

namespace cnlab::sim {

class GpuPackingPolicy : public ScoredPolicy {
 public:
  std::string_view name() const override { return "GpuPacking"; }
  static int score(const Pod& pod, const AllocCluster& cluster, NodeIndex n);

 protected:
  void score_nodes(const Pod& pod, const AllocCluster& cluster, std::span<const NodeIndex> feasible,
                   std::span<int> scores) override;
};

}  // namespace cnlab::sim
