// Placement scoring: which of the places a job fits is best. Private to src/sched.
#pragma once

#include <span>

#include "sched/cluster_state.h"
#include "sched/job_shape.h"

namespace cnlab::sched {

// One feasible place, described before anything is changed.
struct CandidateView {
  uint32_t node = 0;
  std::span<const PartUse> uses;  // existing partitions it would take from
  int64_t cpu = 0, mem = 0;       // host resources it would take on the node
  int whole_gpus_opened = 0;      // entirely free GPUs it would start using
  int mig_change = 0;             // 0: none, 1: creates an instance in free slots, 2: turns a whole GPU to MIG
};

class PlacementScorer {
 public:
  virtual ~PlacementScorer() = default;
  // Lower is better; only called for feasible candidates. Must be deterministic.
  virtual double cost(const ClusterState& state, const JobShape& shape, const CandidateView& candidate) const = 0;
};

// Fragmentation-aware packing: fill partly used GPUs before opening empty ones, tightest fit first,
// busy nodes before idle ones (so idle nodes can power down and stay whole for large gangs), and
// keep CPU and memory in step with the GPUs left on a node so no GPU is stranded without them.
class PackingScorer final : public PlacementScorer {
 public:
  double cost(const ClusterState& state, const JobShape& shape, const CandidateView& candidate) const override;
};

}  // namespace cnlab::sched
