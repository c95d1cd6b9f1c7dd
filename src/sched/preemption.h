// Pre-emption: which running jobs to evict so a higher-priority job can start. Private to src/sched.
//
// Victims are jobs of lower tiers that have run at least their minimum runtime. On every node that
// could host the job, victims are taken cheapest first (lowest tier, checkpointable before not,
// least work lost since the last checkpoint) until the job fits; then any victim the job turns out
// not to need is spared. The node whose set is fewest, then cheapest, wins.
#pragma once

#include <optional>
#include <tuple>
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
  // A running job past its minimum run time, with what ranks it as a victim read once.
  struct Candidate {
    int neg_tier;  // lowest tier first
    bool not_checkpointable;
    int64_t work_lost;
    JobIndex job;
    uint32_t allocation;
    auto key() const { return std::tie(neg_tier, not_checkpointable, work_lost, job); }
  };
  // Built at the first choose(): every node's candidates, cheapest first, in one array, so a node
  // is judged without touching its jobs' records. Jobs evicted later have dead allocations and are
  // skipped; jobs placed in the cycle are no victims.
  void index_candidates(const ClusterState& state) const;

  const std::vector<JobInfo>& jobs_;
  Time now_;
  mutable std::vector<Candidate> candidates_;
  mutable std::vector<uint32_t> node_begin_;  // node n's candidates: [node_begin_[n], node_begin_[n + 1])
};

}  // namespace cnlab::sched
