// What the scheduler says of a pending job as of its latest cycle; kept in memory by the
// SchedulerLoop and merged into the API's answers (status.waiting_reason, queue_position,
// estimated_start).
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

}  // namespace cnlab::server
