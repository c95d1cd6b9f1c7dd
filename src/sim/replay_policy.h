// A scheduler under test in the replay experiment: a whole cycle, snapshot in, decisions out, the
// shape of sched::run_cycle. The engine owns the snapshot, applies the decisions with
// sched::apply_decisions and moves time; a policy only decides.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/common.h"
#include "sched/scheduler.h"

namespace cnlab::sim {

class ReplayPolicy {
 public:
  virtual ~ReplayPolicy() = default;

  // The name reports and files use ("fifo", "cnlab").
  virtual std::string_view name() const = 0;
  // One scheduling cycle at snapshot.now. Placements may only name pending jobs, pre-emptions only
  // running ones; the engine refuses anything else as a bug of the policy.
  virtual sched::CycleResult cycle(const sched::Snapshot& snapshot) = 0;
  // A time after snapshot.now at which a cycle could decide differently although no job arrives or
  // ends (a running job passes its minimum run time and may be pre-empted, a deadline becomes
  // urgent). The engine runs a cycle then; nullopt when only arrivals and completions matter.
  // `snapshot` is the state after `last` was applied.
  virtual std::optional<Time> wake_up(const sched::Snapshot& snapshot, const sched::CycleResult& last) const {
    (void)snapshot;
    (void)last;
    return std::nullopt;
  }
  // Whether a cycle may decide something when no job waits (moves that drain nodes for
  // power-down): the engine then runs cycles after arrivals and completions even with an empty
  // queue. Off, a cycle with nothing waiting is skipped as one that could decide nothing.
  virtual bool decides_with_nothing_waiting() const { return false; }
};

// "fifo,cnlab": the policies `cnlab sim replay --policies` may name, in their default order.
const std::vector<std::string>& replay_policy_keys();

// A fresh policy for one replay; fails naming the valid keys (case does not matter).
Result<std::unique_ptr<ReplayPolicy>> make_replay_policy(std::string_view key);

}  // namespace cnlab::sim
