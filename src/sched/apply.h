// Applies a cycle's decisions to a snapshot, as the control plane would once they are carried out:
// placed jobs run, evicted jobs return to the queue, repartitioned GPUs get their new layout.
// For the simulator and tests; the server applies decisions through the store instead.
#pragma once

#include "sched/decision.h"
#include "sched/snapshot.h"

namespace cnlab::sched {

void apply_decisions(const CycleResult& result, Snapshot& snapshot);

}  // namespace cnlab::sched
