// BestFit: prefers the node left with the least free CPU and GPU after placing the pod:
// raw = floor(100 * (1 - 0.5*(cL-cpu)/128000 - 0.5*(gL-rg)/8000)), then rescaled over the feasible
// nodes to floor((raw-min)*100/(max-min)) (all 0 when max == min), as the framework normalises.
#pragma once

#include "sim/policies/scored_policy.h"

namespace cnlab::sim {

class BestFitPolicy : public ScoredPolicy {
 public:
  std::string_view name() const override { return "BestFit"; }
  // The raw score, before rescaling.
  static int raw_score(const Pod& pod, const AllocCluster& cluster, NodeIndex n);

 protected:
  void score_nodes(const Pod& pod, const AllocCluster& cluster, std::span<const NodeIndex> feasible,
                   std::span<int> scores) override;
};

}  // namespace cnlab::sim
