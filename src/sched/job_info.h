// What the cycle knows of each job, resolved once from the snapshot. Private to src/sched.
#pragma once

#include <optional>

#include "common/time.h"
#include "sched/decision.h"
#include "sched/job_shape.h"

namespace cnlab::sched {

struct JobInfo {
  JobIndex index = 0;
  bool running = false;
  int tier = 0;  // 0 is the highest
  uint32_t project = 0, user = 0;  // interned ids; user ids are global, not per project
  JobShape shape;
  uint32_t shape_id = 0;  // jobs with equal shapes share it
  Time submitted{};
  std::optional<Time> deadline;
  Duration estimate{0};  // 0: unknown
  bool checkpointable = false;
  Duration min_runtime{0};
  Time started{};          // running jobs
  Time last_checkpoint{};  // running jobs; == started when none was taken
  // Running jobs the scheduler may move live (PolicyConfig::max_migrations_per_cycle): checkpointable,
  // on one node, holding no MIG instance (nor GPUs, unless PolicyConfig::migrate_gpu_jobs), not
  // migrating or being cancelled now, not moved within the cooldown.
  bool movable = false;
  // What a move of a running job copies (model::memory_to_move_mib). Its pause is priced by it, and
  // its target must have it free.
  int64_t memory_to_copy_mib = 0;
  bool moved = false;  // moved in this cycle: no victim of a pre-emption in it

  // What a move of this running job places on its target: its shape (with the target traits a
  // movable job's carries), with room for the memory the move copies, not only the memory it asked.
  JobShape shape_to_move() const {
    JobShape moved = shape;
    moved.memory_mib = memory_to_copy_mib;
    return moved;
  }

  // The latest start that still meets the deadline; nullopt without a deadline or an estimate.
  std::optional<Time> latest_start() const {
    if (!deadline || estimate.count() <= 0) return std::nullopt;
    return *deadline - estimate;
  }
};

}  // namespace cnlab::sched
