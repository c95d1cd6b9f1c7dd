// The scheduler's whole input: the world as the control plane sees it at `now`.
#pragma once

#include <vector>

#include "common/time.h"
#include "model/model.h"
#include "sched/usage_ledger.h"

namespace cnlab::sched {

struct Snapshot {
  Time now{};
  std::vector<model::Node> nodes;
  // Pending and Running jobs; jobs in other phases are ignored. Decisions refer to jobs by their
  // index in this vector.
  std::vector<model::Job> jobs;
  // Shares for fair share; a project not listed has share 1.
  std::vector<model::Project> projects;
  UsageLedger usage;
};

}  // namespace cnlab::sched
