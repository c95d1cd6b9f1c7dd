// GpuClustering: keeps pods of one GPU shape together. A CPU-only pod scores 0. Otherwise, with the
// pod's tag ("share", or "k-gpu" for k whole GPUs) and S the tags of the GPU pods already on the
// node: floor(25*(8000-gL)/8000) plus 75 if S = {tag}, 50 if tag is in S among others, 25 if S is
// empty, 0 otherwise.
#pragma once

#include <vector>

#include "sim/policies/scored_policy.h"

namespace cnlab::sim {

class GpuClusteringPolicy : public ScoredPolicy {
 public:
  std::string_view name() const override { return "GpuClustering"; }
  void reset(const AllocCluster& cluster, const RunContext& context) override;
  void on_placed(const Pod& pod, const Choice& choice) override;
  int score(const Pod& pod, const AllocCluster& cluster, NodeIndex n) const;

 protected:
  void score_nodes(const Pod& pod, const AllocCluster& cluster, std::span<const NodeIndex> feasible,
                   std::span<int> scores) override;

 private:
  // Bit 0: "share"; bit k: "k-gpu".
  static uint32_t tag(const Pod& pod);
  std::vector<uint32_t> tags_;  // per node, the tags of the GPU pods on it
};

}  // namespace cnlab::sim
