// A node's capacity for one shape as running jobs are taken off it, judged without touching the
// cluster state: the light model pre-emption and migration rank nodes with before they verify the
// best few with a real search. Private to src/sched.
#pragma once

#include <vector>

#include "sched/cluster_state.h"
#include "sched/job_shape.h"

namespace cnlab::sched {

class NodeFit {
 public:
  // `repartition`: an idle whole GPU counts for a MIG request (it may be turned to MIG).
  NodeFit(const ClusterState& state, const JobShape& shape, bool repartition)
      : state_(state), shape_(shape), repartition_(repartition) {}

  // Starts over with `node` as it is now (reusing the buffer: called once per node per search).
  void load(uint32_t node);
  // Whether the node has anything the shape could use at all.
  bool relevant() const { return !parts_.empty() || free_slots_ || shape_.kind == model::SliceKind::kNone; }
  // Counts what allocation `a` (on the loaded node) holds as free.
  void take(const Allocation& a);
  bool fits() const;

 private:
  struct Part {
    uint32_t partition;
    int blocks;
    int64_t mem;
    int jobs;
  };
  void add(uint32_t p);

  const ClusterState& state_;
  const JobShape& shape_;
  bool repartition_;
  int64_t cpu_ = 0, mem_ = 0;
  bool free_slots_ = false;
  std::vector<Part> parts_;
};

}  // namespace cnlab::sched
