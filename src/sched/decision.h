// What one scheduling cycle decides. Jobs are referred to by their index in Snapshot::jobs and
// nodes by their index in Snapshot::nodes, so a result is cheap to build and to apply.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/time.h"
#include "model/model.h"

namespace cnlab::sched {

using JobIndex = uint32_t;
using NodeIndex = uint32_t;

struct GpuGrant {
  int gpu = 0;           // index on the node
  int blocks = 0;        // 100 for a whole GPU; the instance's blocks for a MIG request
  int64_t vram_mib = 0;  // the VRAM quota to enforce
  int mig_start = -1;    // the MIG instance the grant sits in (by first memory slot), -1 for none

  bool operator==(const GpuGrant&) const = default;
};

struct NodeGrant {
  NodeIndex node = 0;
  std::vector<GpuGrant> gpus;
  bool operator==(const NodeGrant&) const = default;
};

// Start `job` on these GPUs. When `after_preempting` is not empty the grant is valid once those
// jobs have exited (they are in CycleResult::preemptions); when `after_migrating` is not empty,
// once those jobs have moved off its node (they are in CycleResult::migrations).
struct Placement {
  JobIndex job = 0;
  std::vector<NodeGrant> nodes;
  std::vector<JobIndex> after_preempting;
  std::vector<JobIndex> after_migrating;
  bool operator==(const Placement&) const = default;
};

// Why the scheduler moves a job: to make room for a waiting job, or to empty its node so that the
// node goes idle and can power down (sched/drain.h).
enum class MoveReason : uint8_t { kRoom, kDrain };

// Move running `job` live to `to` (frozen, checkpointed, restored there: it keeps its progress).
// kRoom: to make room for the waiting job `for_job`. kDrain: to empty the node it runs on now for
// power-down; `for_job` means nothing then, and every other job on that node moves in the same
// cycle. `pause` is how long the scheduler expects the job to be frozen
// (PolicyConfig::migration_pause_*); its expected end moves by as much.
struct Migration {
  JobIndex job = 0;
  std::vector<NodeGrant> to;
  JobIndex for_job = 0;
  std::chrono::milliseconds pause{0};
  MoveReason reason = MoveReason::kRoom;
  bool operator==(const Migration&) const = default;
};

// Evict `victim` to make room for `for_job`; it is requeued. A checkpointable victim resumes from
// its latest checkpoint (the agent asks it for one more before stopping it, which may or may not
// finish in time), any other victim from the start. `work_lost` is the run time since the latest
// checkpoint the scheduler knows of (or since the start): what eviction may throw away.
struct Preemption {
  JobIndex victim = 0;
  JobIndex for_job = 0;
  bool checkpoint = false;
  bool requeue = true;
  Duration work_lost{0};  // run time since the victim's last checkpoint (or start)
  bool operator==(const Preemption&) const = default;
};

// `job` cannot start now; `gpus` of `node` are held for it from `start`.
struct Reservation {
  JobIndex job = 0;
  NodeIndex node = 0;
  Time start{};
  std::vector<GpuGrant> gpus;
  bool meets_deadline = true;  // false when the job has a deadline this start cannot meet
  bool operator==(const Reservation&) const = default;
};

// Change a GPU's MIG mode or instances before a placement on it. `instances` is the complete new
// layout (the existing instances plus the ones to create).
struct Repartition {
  NodeIndex node = 0;
  int gpu = 0;
  bool mig_enabled = true;
  std::vector<model::MigInstance> instances;
  bool operator==(const Repartition&) const = default;
};

struct PowerDownCandidate {
  NodeIndex node = 0;
  Time idle_since{};
  bool operator==(const PowerDownCandidate&) const = default;
};

// A job left waiting, with the index of its human-readable reason in CycleResult::reasons
// (many jobs of the same shape share one reason).
struct Waiting {
  JobIndex job = 0;
  uint32_t reason = 0;
  bool operator==(const Waiting&) const = default;
};

struct CycleStats {
  uint32_t pending = 0;
  uint32_t running = 0;
  uint32_t placement_attempts = 0;  // searches run (failures answered from memory do not count)
  uint32_t candidates_scored = 0;
  uint32_t migration_searches = 0;  // waiting jobs for which moves of running jobs were looked for
};

struct CycleResult {
  std::vector<Placement> placements;  // in the order they were decided
  std::vector<Preemption> preemptions;
  std::vector<Migration> migrations;  // in the order they were decided
  std::vector<Reservation> reservations;
  std::vector<Repartition> repartitions;
  std::vector<PowerDownCandidate> power_down;
  std::vector<Waiting> waiting;      // every pending job not placed, in queue order
  std::vector<std::string> reasons;  // texts referred to by Waiting::reason
  std::vector<std::string> warnings;  // inconsistencies found in the snapshot (and worked around)
  CycleStats stats;

  const std::string& reason_for(JobIndex job) const;  // empty when the job is not waiting
};

}  // namespace cnlab::sched
