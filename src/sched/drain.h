// Drains for power-down: every running job of a lightly used node moved live onto nodes that are
// busy anyway, so that the node goes idle and is reported for power-down. Private to src/sched.
//
// Why: power-down only finds nodes that happen to run nothing, and with long jobs scattered over
// the cluster few nodes ever do. Gathering the long-running work onto fewer nodes lets the others
// go idle; jobs that end soon are left to finish, so their nodes drain by themselves.
//
// A node is drained whole or not at all (a partial drain pays pauses and powers nothing down):
// every job on it must be movable (JobInfo::movable), expected to run on past `power_down_after`,
// and at most `max_moves_per_job` of them. Candidates are ranked lightest first (fewest jobs,
// lowest allocation, cheapest moves by MoveSelector::cost) and the best few are verified for real:
// each job, largest first, must fit on a node that already runs work (never an idle node, never
// the node itself), preferring a node that stays busy at least as long as the job anyway (a move
// there keeps no node on longer), fullest first. The node-time saved, less the time the moves
// keep their targets on longer, must be at least `power_down_after`, and the nodes that stay busy
// must keep PolicyConfig::drain_reserve of their capacity free.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "sched/calendar.h"
#include "sched/cluster_state.h"
#include "sched/job_info.h"
#include "sched/migration.h"
#include "sched/placement.h"
#include "sched/policy_config.h"

namespace cnlab::sched {

struct Drain {
  uint32_t node = 0;        // the node emptied
  std::vector<Move> moves;  // every job on it, each onto another busy node
};

// What the drains of one cycle may still spend.
struct DrainBudget {
  int moves = 0;          // moves left (PolicyConfig::max_drain_moves_per_cycle and the cycle's total)
  int verifications = 0;  // candidate nodes left to verify (each verification runs placement searches)
};

class DrainSelector {
 public:
  DrainSelector(const std::vector<JobInfo>& jobs, const PolicyConfig& config, const MoveSelector& prices, Time now)
      : jobs_(jobs), config_(config), prices_(prices), now_(now) {}

  // The next node to empty, within `budget` (verifications are charged to it; the caller charges
  // the moves); nullopt when none qualifies. Nodes marked in `skip` are not considered, and a node
  // that fails verification is marked there. Nodes marked in `settling` (a live migration under
  // way leaves or enters them) are neither emptied nor moved onto: the move in flight would undo
  // the drain, or the drain the move. The state is left as it was: the caller applies the moves.
  // `search` must read `state`.
  std::optional<Drain> choose(ClusterState& state, const Calendar& calendar, const PlacementSearch& search,
                              DrainBudget& budget, std::vector<uint8_t>& skip, const std::vector<uint8_t>& settling) const;

 private:
  std::optional<Drain> verify(ClusterState& state, const PlacementSearch& search, uint32_t node,
                              const std::vector<uint8_t>& settling) const;

  const std::vector<JobInfo>& jobs_;
  const PolicyConfig& config_;
  const MoveSelector& prices_;
  Time now_;
};

}  // namespace cnlab::sched
