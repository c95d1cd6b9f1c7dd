// Placement scoring: which of the places a job fits is best. Private to src/sched.
#pragma once

#include <span>
#include <vector>

#include "sched/cluster_state.h"
#include "sched/job_shape.h"
#include "sched/workload_profile.h"

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

// Fragmentation-aware packing across GPUs, CPU and memory.
//
// For each typical request shape m of the workload (learned from arrivals, weight w_m), a node can
// still serve some number of such requests: as many as its GPUs' free blocks hold (per partition,
// floor(free / blocks_m)), or its free whole GPUs hold, and as its free CPU and memory hold. What
// that number times the request's size leaves of the node's free GPU capacity is fragmentation for
// m: capacity that is free but that m cannot use. A place costs the expected capacity it makes
// unusable, dearer for shapes that accept few of the cluster's GPUs (s_m = all GPUs / GPUs of the
// models m accepts; 1 for a shape that takes any model), whose capacity cannot be found elsewhere:
//     cost = sum_m w_m * s_m * (usable_m(node before) - usable_m(node after))
// This is the fragmentation gradient of FGD (Weng et al., ATC'23), measured with the request counts
// a node can actually hold, host CPU and memory included, instead of FGD's per-GPU test. One more
// term prices the mix rather than one shape at a time: GPU capacity a node's free CPU or memory
// cannot feed at the arrived GPU jobs' average CPU and memory per block is stranded; a place that
// strands more pays twice for it. So a CPU-only job goes where CPU is plentiful, and a CPU-hungry
// one does not starve a node's GPUs. Ties go to the tightest fit, then to busy nodes (an idle node
// stays idle for power-down and whole for gangs).
class PackingScorer final : public PlacementScorer {
 public:
  // `profile` may be null or empty: then only the tie-breakers decide (tightest fit, busy nodes).
  explicit PackingScorer(const WorkloadProfile* profile = nullptr) : profile_(profile) {}
  double cost(const ClusterState& state, const JobShape& shape, const CandidateView& candidate) const override;

 private:
  // Per node, how many requests of each typical shape its GPUs alone could take now.
  struct NodeSlots {
    uint32_t node_version = UINT32_MAX;
    uint64_t profile_version = UINT64_MAX;
    std::vector<int32_t> gpu_slots;
    // How many of each typical shape the node's free CPU and memory hold; depends on the shapes'
    // mean memory too, so it is keyed on the profile's job count.
    uint32_t host_node_version = UINT32_MAX;
    uint64_t host_profile_jobs = UINT64_MAX;
    std::vector<int32_t> host_slots;
  };
  const std::vector<int32_t>& gpu_slots(const ClusterState& state, uint32_t node) const;
  const std::vector<int32_t>& host_slots_now(const NodeState& node, uint32_t index) const;
  static int32_t partition_slots(const PartitionState& p, const JobShape& m, int free_blocks, int64_t free_mem);

  const WorkloadProfile* profile_;
  mutable std::vector<NodeSlots> cache_;
  // Per typical shape, for the profile version they were computed at: 1 / its CPU, and the cluster's
  // GPUs over the GPUs of the models it accepts.
  void refresh_shape_constants(const ClusterState& state) const;
  mutable std::vector<double> inverse_cpu_;
  mutable std::vector<double> scarcity_;
  mutable uint64_t shape_constants_version_ = UINT64_MAX;
};

}  // namespace cnlab::sched
