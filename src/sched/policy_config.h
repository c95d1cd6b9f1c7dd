// The knobs of the scheduler, composed from configuration. Defaults are what a cluster gets without
// a configuration file.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/json_reader.h"
#include "common/result.h"
#include "common/time.h"

namespace cnlab::sched {

// The order in which one user's waiting jobs of a tier are taken (projects and users are always
// taken in fair-share order first).
enum class QueueOrder {
  kSubmitted,      // "submitted": oldest first
  kResponseRatio,  // "response_ratio": highest (wait + estimate) / estimate first (HRRN)
};
// The name a configuration uses for `order`.
const char* queue_order_name(QueueOrder order);

// A priority tier. Tiers are listed highest first; a job names its tier by `name`
// (its priority_class).
struct TierConfig {
  std::string name;
  bool may_preempt = false;    // may evict running jobs of lower tiers
  Duration min_runtime{600};   // a job of this tier is not pre-empted before it ran this long
  QueueOrder order = QueueOrder::kSubmitted;
};

struct PolicyConfig {
  std::vector<TierConfig> tiers = {
      {"inference", true, Duration{0}},
      {"production", true, 10 * kMinute},
      // Development work is mostly short iterations: a short run passes a long one of its user that
      // waits for room (docs/benchmarks/replay.md measures it).
      {"dev", false, 10 * kMinute, QueueOrder::kResponseRatio},
      {"opportunistic", false, Duration{0}},
  };
  // The estimate the response-ratio order assumes for a job that gives none (Slurm's DefaultTime).
  Duration default_estimate = 1 * kDay;
  // Fair share: how fast past usage is forgotten.
  Duration fair_share_half_life = 7 * kDay;
  // Deadline jobs whose latest start is within this of now go first in their tier, earliest first.
  Duration deadline_urgency = 1 * kHour;
  // Let later jobs start in holes as long as they delay no reservation.
  bool backfill = true;
  // Blocked jobs without deadlines that get a reservation (highest in the queue first), so that
  // backfill cannot starve large jobs. Deadline jobs always get one.
  int reserve_top_jobs = 8;
  // Reservations per cycle in all, deadline jobs first (each costs a scan of the cluster).
  int max_reservations = 64;
  // Waiting jobs of pre-empting tiers for which victims are looked for, per cycle.
  int max_preemptors_per_cycle = 64;
  // Turn an idle whole GPU into MIG instances when a MIG request finds no room.
  bool repartition_idle_gpus = true;
  // A node with no work for this long is reported as a candidate to power down.
  Duration power_down_after = 30 * kMinute;
  // Partitions (or nodes, for whole GPUs) scored per placement; more packs tighter, costs time.
  int placement_candidates = 64;
  // Whether a gang larger than any node of its model may span nodes (off: such a job waits, as a
  // Kubernetes pod, which lives on one node, would).
  bool gangs_span_nodes = true;

  // Live migration for room: a job that cannot start now (nor, by its reservation, within
  // `migrate_after_wait`) may move a few running jobs off a node onto free room elsewhere and take
  // what they leave. It is tried before pre-emption: a move loses no work, an eviction does. Only checkpointable single-node jobs that
  // hold no MIG instance and were not moved within `migration_cooldown` move. Moves per cycle in
  // all (0: the scheduler never moves a job), and per waiting job.
  int max_migrations_per_cycle = 0;
  int max_moves_per_job = 4;
  // Whether jobs holding GPUs may move: their GPU memory and contexts move only where NVIDIA's
  // cuda-checkpoint is on the nodes (the replay assumes it is; the server carries such a move out
  // only between nodes that report gpu_checkpoint).
  bool migrate_gpu_jobs = false;
  // Whether a job may move jobs of a higher tier than its own. Off, a move never pauses work more
  // important than the job it makes room for (docs/benchmarks/replay.md measures both).
  bool move_higher_tiers = false;
  Duration migration_cooldown = 1 * kHour;
  Duration migrate_after_wait = 10 * kMinute;
  // A move's expected pause: a fixed part plus a part per GiB of the job's host memory (the
  // stop-and-copy path measured in docs/benchmarks/migration.md). A job's move costs its pause
  // times its tier's weight (twice the weight of the tier below it), and the cheapest moves win.
  std::chrono::milliseconds migration_pause_base{1000};
  std::chrono::milliseconds migration_pause_per_gib{4400};

  // Drains for power-down (sched/drain.h): when no job is left waiting for room, a cycle may move
  // every running job off a lightly used node onto nodes that are busy anyway, so that the node
  // goes idle and is reported for power-down after `power_down_after`. Drain moves per cycle (0:
  // never). They are live migrations like the moves for room, so they also count against
  // `max_migrations_per_cycle` (which must then be above 0), `max_moves_per_job` bounds the jobs
  // of one drained node, and `migration_cooldown` and `migrate_gpu_jobs` apply. A job expected to
  // end within `power_down_after` is left to finish, and its node is not drained.
  int max_drain_moves_per_cycle = 0;
  // The nodes that stay busy keep at least this fraction of their GPU blocks, CPU and memory free
  // after a drain, so that a burst of arrivals still finds room without waiting for a node to boot.
  double drain_reserve = 0.25;

  // The pause a move of a job holding `memory_mib` of host memory is expected to cost.
  std::chrono::milliseconds migration_pause(int64_t memory_mib) const {
    return migration_pause_base + migration_pause_per_gib * memory_mib / 1024;
  }

  // Index of the tier named `name`, or -1.
  int tier_index(std::string_view name) const;
};

// Reads {"tiers": [{"name": "inference", "may_preempt": true, "min_runtime": "0s"}, ...],
// "fair_share_half_life": "7d", ...}; absent fields keep their defaults.
Result<PolicyConfig> policy_config_from_json(const Json& json);
Json to_json(const PolicyConfig& config);
// The same from a JSON file, for the commands that take one (`--scheduler-config`): errors name
// `flag`, the file and the field. (The cycle itself reads no files.)
Result<PolicyConfig> policy_config_from_file(const std::string& path, std::string_view flag);

}  // namespace cnlab::sched
