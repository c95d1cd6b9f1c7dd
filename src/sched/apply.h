// Applies a cycle's decisions to a snapshot, as the control plane would once they are carried out:
// placed jobs run, evicted jobs return to the queue, migrated jobs are bound to their new place
// (with a Migrated event), repartitioned GPUs get their new layout.
// For the simulator and tests; the server applies decisions through the store instead.
// It changes what the decisions say and nothing else: keeping nodes' idle_since when jobs end or
// are evicted, jobs' checkpoint times and the usage ledger is the caller's (the replay engine does).
#pragma once

#include "sched/decision.h"
#include "sched/snapshot.h"

namespace cnlab::sched {

void apply_decisions(const CycleResult& result, Snapshot& snapshot);

}  // namespace cnlab::sched
