// The search for where a job can start now: partitions for block slices, whole GPUs on one node
// (or several, for gangs larger than any node), MIG instances (existing, new in free slots, or on
// a GPU turned to MIG). Private to src/sched; the sim reaches it through sched/scheduler.h.
#pragma once

#include <optional>
#include <vector>

#include "sched/calendar.h"
#include "sched/cluster_state.h"
#include "sched/job_shape.h"
#include "sched/packing.h"
#include "sched/policy_config.h"

namespace cnlab::sched {

struct PlannedNode {
  uint32_t node = 0;
  int64_t cpu = 0, mem = 0;
  std::vector<PartUse> uses;
  // A MIG request may first need its GPU switched to MIG mode and/or a new instance.
  uint32_t mig_gpu = kNone;
  bool enable_mig = false;
  int create_profile = -1, create_start = -1;
};

struct Plan {
  std::vector<PlannedNode> nodes;
  double cost = 0;
};

struct SearchLimits {
  int candidates = 64;       // feasible places scored before the best is taken
  bool repartition = true;   // may turn an idle whole GPU into MIG
  bool span_nodes = true;    // a gang larger than any node may take GPUs of several nodes

  static SearchLimits of(const PolicyConfig& config) {
    return {config.placement_candidates, config.repartition_idle_gpus, config.gangs_span_nodes};
  }
};

class PlacementSearch {
 public:
  PlacementSearch(const ClusterState& state, const Calendar& calendar, const PlacementScorer& scorer,
                  SearchLimits limits)
      : state_(state), calendar_(calendar), scorer_(scorer), limits_(limits) {}

  struct Stats {
    uint32_t scored = 0;          // feasible candidates scored
    uint32_t hold_rejections = 0;  // candidates that fit but would have delayed a reservation
  };
  // The best place to start `shape` now for a job expected to end at `end`; nullopt when none.
  std::optional<Plan> find(const JobShape& shape, Time now, Time end, Stats* stats = nullptr) const;
  // The same, restricted to one node (gangs larger than a node are not considered).
  std::optional<Plan> find_on_node(const JobShape& shape, uint32_t node, Time now, Time end) const;

 private:
  struct Best;
  bool block_fits(const JobShape& shape, uint32_t p, Time now, Time end, Best& best, PartUse& use) const;
  void score_block(const JobShape& shape, const PartUse& use, Best& best) const;
  void blocks(const JobShape& shape, Time now, Time end, Best& best) const;
  void blocks_on_node(const JobShape& shape, uint32_t node, Time now, Time end, Best& best) const;
  void whole_on_node(const JobShape& shape, uint32_t node, model::ModelId model, Time now, Time end,
                     Best& best) const;
  void whole_single(const JobShape& shape, Time now, Time end, Best& best) const;
  void whole_multi(const JobShape& shape, Time now, Time end, Best& best) const;
  void mig(const JobShape& shape, Time now, Time end, uint32_t only_node, Best& best) const;
  void host_only(const JobShape& shape, Time now, Time end, uint32_t only_node, Best& best) const;
  // Whether `node` has the host resources free and the traits the shape needs.
  bool host_fits(const JobShape& shape, uint32_t node, int64_t cpu, int64_t mem) const;
  bool calendar_allows(uint32_t node, Time now, Time end, int64_t cpu, int64_t mem, std::span<const PartUse> uses,
                       Best& best) const;

  const ClusterState& state_;
  const Calendar& calendar_;
  const PlacementScorer& scorer_;
  SearchLimits limits_;
};

// Applies a plan: MIG changes, then one allocation per node; charges the calendar. Returns the
// grants as decisions name them and the allocation ids.
struct Applied {
  std::vector<NodeGrant> grants;
  std::vector<Repartition> repartitions;
  std::vector<uint32_t> allocations;
};
Applied apply_plan(ClusterState& state, Calendar& calendar, const Plan& plan, JobIndex job, bool exclusive_mig,
                   Time now, Time end);

// Running jobs move (sched/migration.h, sched/drain.h) onto one node, into a MIG instance only on a
// GPU already in MIG mode: an existing free one, or one made in free slots, as `cnlab migrate`
// chooses. Turning a GPU's mode would need it idle and its agent to repartition before the restore.
bool mover_may_take(const Plan& plan);

// A mover's place held while the next mover's is sought, undone once the whole set is known: its
// allocation, and the MIG instance made for it, if any (so that two movers never plan the same
// free slots).
struct TentativeHold {
  uint32_t allocation = kNone;
  uint32_t instance = kNone;
};
TentativeHold hold_tentatively(ClusterState& state, const PlannedNode& planned, JobIndex job, bool exclusive_mig,
                               Time now, Time end);
void undo_hold(ClusterState& state, const TentativeHold& hold);

}  // namespace cnlab::sched
