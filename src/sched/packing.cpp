#include "sched/packing.h"

#include <algorithm>

namespace cnlab::sched {

double PackingScorer::cost(const ClusterState& state, const JobShape& shape, const CandidateView& c) const {
  const NodeState& node = state.node(c.node);
  double cost = 0;
  // Tightest fit: the blocks a partition keeps free after the grant are likely wasted.
  for (const PartUse& use : c.uses) {
    const PartitionState& p = state.partition(use.partition);
    cost += static_cast<double>(p.free_blocks - use.blocks) / model::kBlocksPerGpu;
  }
  cost += c.whole_gpus_opened * 1.0 + c.mig_change * 0.5;
  // Busy nodes first: an idle node stays idle (power-down) and whole (large gangs).
  if (node.allocations == 0) cost += 2.0;
  // Host resources in step with GPU capacity: a node whose CPU or memory runs out before its GPUs
  // strands them.
  int blocks_after = node.blocks_total - node.blocks_used;
  for (const PartUse& use : c.uses) blocks_after -= use.blocks;
  blocks_after -= c.mig_change > 0 ? shape.blocks : 0;
  if (node.blocks_total > 0) {
    double gpu_left = static_cast<double>(blocks_after) / node.blocks_total;
    double cpu_left = node.cpu_total > 0 ? static_cast<double>(node.cpu_free - c.cpu) / node.cpu_total : 1.0;
    double mem_left = node.mem_total > 0 ? static_cast<double>(node.mem_free - c.mem) / node.mem_total : 1.0;
    cost += std::max(0.0, gpu_left - std::min(cpu_left, mem_left));
  }
  return cost;
}

}  // namespace cnlab::sched
