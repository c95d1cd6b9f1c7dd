// The face of src/sched: the scheduler as a pure library. A snapshot in, decisions out; no I/O, no
// clock of its own (`snapshot.now` is the only time it reads), the same input always gives the
// same output. Thread-compatible: nothing is shared between calls.
#pragma once

#include "sched/apply.h"
#include "sched/decision.h"
#include "sched/placer.h"
#include "sched/policy_config.h"
#include "sched/snapshot.h"
#include "sched/usage_ledger.h"

namespace cnlab::sched {

// Runs one scheduling cycle. In order: priority tiers (highest first); inside a tier, deadline jobs
// about to miss their latest start (earliest first), then fair share; each job is placed now if it
// fits without delaying a reservation (backfill), else pre-empts lower tiers when its tier may (or
// when its deadline needs it), else gets a reservation forward in time (deadline jobs and the
// highest blocked jobs), else waits with a reason.
CycleResult run_cycle(const Snapshot& snapshot, const PolicyConfig& config);

}  // namespace cnlab::sched
