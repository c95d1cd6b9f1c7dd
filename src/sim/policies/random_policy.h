// Random: a uniformly random feasible node; a sharing pod gets a uniformly random GPU with enough
// free milli, a whole-GPU pod the lowest-index fully free GPUs.
#pragma once

#include <optional>

#include "sim/alloc_policy.h"
#include "sim/rng.h"

namespace cnlab::sim {

class RandomPolicy : public AllocPolicy {
 public:
  std::string_view name() const override { return "Random"; }
  // Seeds the policy's own stream from the run's seed, so the run is reproducible.
  void reset(const AllocCluster& cluster, const RunContext& context) override;
  std::optional<Choice> place(const Pod& pod, const AllocCluster& cluster,
                              std::span<const NodeIndex> feasible) override;

 private:
  std::optional<Rng> rng_;
};

}  // namespace cnlab::sim
