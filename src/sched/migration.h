// Migration for room: which running jobs to move live, and where, so that a waiting job can start.
// Private to src/sched.
//
// Movers are running jobs marked movable (JobInfo::movable). On every node that could host the
// waiting job, movers are taken fewest first (the most GPU blocks first, then the cheapest move)
// until a light model says the job fits, at most `max_moves` of them. The best few nodes (fewest
// moves, then cheapest) are verified for real: the job must fit on the node once its movers are
// gone, every mover must fit elsewhere (never back on that node) once the job holds its place, and
// any mover the job turns out not to need stays. Unlike pre-emption nothing is lost: movers keep
// their progress and pay a pause. Movers are of the job's tier or below (any tier with
// PolicyConfig::move_higher_tiers), the dearer the higher.
#pragma once

#include <chrono>
#include <optional>
#include <vector>

#include "sched/cluster_state.h"
#include "sched/job_info.h"
#include "sched/placement.h"
#include "sched/policy_config.h"

namespace cnlab::sched {

// A mover's expected end once it pauses `pause`: where it was, later by the pause (kNever stays).
inline Time end_after_pause(Time end, std::chrono::milliseconds pause) {
  return end == kNever ? end : end + std::chrono::ceil<Duration>(pause);
}

struct Move {
  JobIndex job = 0;
  uint32_t from = 0;  // its allocation now
  Plan to;            // single node, never the node the waiting job takes
  std::chrono::milliseconds pause{0};
  Time end{};  // its expected end there: where it was, later by the pause
};

struct MoveSet {
  uint32_t node = 0;  // where the waiting job goes
  Plan plan;          // its place there once the movers are gone
  std::vector<Move> moves;
};

class MoveSelector {
 public:
  MoveSelector(const std::vector<JobInfo>& jobs, const PolicyConfig& config, Time now)
      : jobs_(jobs), config_(config), now_(now) {}

  // Chooses moves for a single-node `shape` of tier `tier` that ends at `end`; the state is left
  // as it was. `search` must read `state`.
  std::optional<MoveSet> choose(ClusterState& state, const PlacementSearch& search, const JobShape& shape, int tier,
                                Time end, int max_moves) const;

  // What moving `job` costs: its expected pause weighted by its tier.
  int64_t cost(const JobInfo& job) const;

 private:
  // Verifies node `node` with candidate movers `chosen` (allocation ids); nullopt when the job or
  // a mover does not fit for real.
  std::optional<MoveSet> verify(ClusterState& state, const PlacementSearch& search, const JobShape& shape,
                                uint32_t node, std::vector<uint32_t> chosen, Time end) const;

  const std::vector<JobInfo>& jobs_;
  const PolicyConfig& config_;
  Time now_;
};

}  // namespace cnlab::sched
