// What the scheduler says of a pending job, and of a node with nothing to run, as of its latest
// cycle; kept in memory by the SchedulerLoop and merged into the API's answers
// (status.waiting_reason, queue_position, estimated_start of a job; status.idle_since and
// power_down_candidate of a node).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/time.h"

namespace cnlab::server {

struct JobWaiting {
  std::string reason;                   // "" when the job is not waiting
  int64_t queue_position = 0;           // 1-based, in the scheduler's order for the cycle; 0: not waiting
  std::optional<Time> estimated_start;  // when the scheduler reserved GPUs for it
};

struct NodeIdle {
  std::optional<Time> since;  // when it last had a job bound to it; empty: busy (or not seen yet)
  // Idle for the policy's power_down_after with no reservation on it: it could be powered down.
  bool power_down_candidate = false;
};

}  // namespace cnlab::server
