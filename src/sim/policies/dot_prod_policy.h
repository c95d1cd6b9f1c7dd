// DotProd: prefers the node whose free CPU and GPU point least in the pod's direction:
// floor(100 * (1 - ((cL/128000)(cpu/128000) + (gL/8000)(rg/8000)) / 2)), cL the node's free CPU
// milli, gL its total free GPU milli, rg = num_gpu*gpu_milli. The constants are the published
// simulator's normalisers (a 128-core, 8-GPU node), not the node's own capacity.
#pragma once

#include "sim/policies/scored_policy.h"

namespace cnlab::sim {

class DotProdPolicy : public ScoredPolicy {
 public:
  std::string_view name() const override { return "DotProd"; }
  static int score(const Pod& pod, const AllocCluster& cluster, NodeIndex n);

 protected:
  void score_nodes(const Pod& pod, const AllocCluster& cluster, std::span<const NodeIndex> feasible,
                   std::span<int> scores) override;
};

}  // namespace cnlab::sim
