// Pre-emption: which running jobs to evict so a higher-priority job can start. Private to src/sched.
//
// Victims are jobs of lower tiers that have run at least their minimum runtime. On every node that
// could host the job, victims are taken cheapest first (lowest tier, checkpointable before not,
// least work lost since the last checkpoint) until the job fits; then any victim the job turns out
// not to need is spared. The node whose set is fewest, then cheapest, wins.
#pragma once

#include <optional>
#include <vector>

#include "sched/calendar.h"
#include "sched/cluster_state.h"
#include "sched/job_info.h"
#include "sched/placement.h"

namespace cnlab::sched {

struct VictimSet {
  std::vector<JobIndex> victims;  // cheapest first
  uint32_t node = 0;
  Plan plan;  // where the job goes once the victims are gone
};

class VictimSelector {
 public:
  VictimSelector(const std::vector<JobInfo>& jobs, Time now) : jobs_(jobs), now_(now) {}

  // Chooses victims of tiers below `tier` for `shape` (single-node shapes only). The state is left
  // as it was. `search` must read `state`.
  std::optional<VictimSet> choose(ClusterState& state, const PlacementSearch& search, const JobShape& shape, int tier,
                                  Time end) const;

  // Run time since the last checkpoint (or start): what eviction throws away.
  Duration work_lost(const JobInfo& job) const;

 private:
  bool eligible(const JobInfo& victim, int tier) const;
  // Per node, the lowest tier (largest index) among its running jobs that passed their minimum run
  // time, or -1: nodes with nothing below a pre-emptor's tier are skipped without touching their
  // jobs. Built at the first choose(); evictions only lower the truth, so it stays an upper bound.
  const std::vector<int>& lowest_victim_tier(const ClusterState& state) const;

  const std::vector<JobInfo>& jobs_;
  Time now_;
  mutable std::vector<int> lowest_victim_tier_;
};

}  // namespace cnlab::sched
