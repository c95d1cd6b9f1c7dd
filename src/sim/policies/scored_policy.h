// The shape the scored baselines share: score every feasible node with an integer in [0, 100],
// keep the highest, break ties by the lower rank, then pick the GPUs inside the chosen node.
#pragma once

#include <vector>

#include "sim/alloc_policy.h"

namespace cnlab::sim {

class ScoredPolicy : public AllocPolicy {
 public:
  // With one feasible node it is taken unscored, as the methodology says.
  std::optional<Choice> place(const Pod& pod, const AllocCluster& cluster,
                              std::span<const NodeIndex> feasible) override;

 protected:
  // Writes the score of feasible[i] to scores[i].
  virtual void score_nodes(const Pod& pod, const AllocCluster& cluster, std::span<const NodeIndex> feasible,
                           std::span<int> scores) = 0;
  // The GPUs the pod takes on `node` (see Choice). The default is the rule of DotProd,
  // GpuClustering, GpuPacking and BestFit: a sharing pod takes the tightest GPU (tightest_gpu), a
  // whole-GPU pod the lowest-index fully free ones.
  virtual uint32_t choose_gpus(const Pod& pod, const AllocCluster& cluster, NodeIndex node);

 private:
  std::vector<int> scores_;
};

}  // namespace cnlab::sim
