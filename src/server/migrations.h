// Live migration and periodic checkpoints, the server's side (the agents do the dumping and the
// restoring; see model::Migration for the steps).
//
// MigrationWatch, a background pass, keeps both going:
//  - a migration whose source never handed its dump over within `timeout` is given up (the job ran on);
//  - a migration whose target did not report the job Running within `timeout` of the freeze, or
//    whose target was lost meanwhile (the job requeued), is rolled back: the job is bound to its
//    source again, which thaws it. A migration never loses a job;
//  - a Running checkpointable job due a periodic checkpoint (its class's interval since it started
//    or was last checkpointed) gets checkpoint_requested_at; its agent takes one, the job running on.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>

#include "model/job.h"
#include "model/mig_layout.h"
#include "server/metrics.h"
#include "server/object_cache.h"
#include "server/periodic.h"
#include "store/store.h"

namespace cnlab::server {

// The source's dump of a migrating job is stored: bind it to the target (phase Scheduled, its run
// time kept) and the GPUs chosen there (Migration::gpus). Only single-node jobs migrate, and those
// holding GPUs only between nodes that checkpoint GPU state (see migration_refusal).
void bind_to_migration_target(model::Job& job, const std::string& source, int64_t frozen_at_ms, Time now);
// Gives a migrating job back to its source (bound there, Running), with a MigrationFailed event.
void roll_back_migration(model::Job& job, Time now, const std::string& why);
// Why `job` cannot migrate now from `source` (its node; null when unknown), or "" when it can. A job
// holding GPUs moves only off a node whose agent checkpoints GPU state.
std::string migration_refusal(const model::Job& job, const model::Node* source);
// Why a job holding GPUs on `source` (null when unknown) cannot be restored on `target` with their
// state (the target's agent restores no GPU state, or one side's GPUs are simulated and the other's
// real), or "".
std::string gpu_state_target_refusal(const model::Node* source, const model::Node& target);

// Host CPU and memory each node has free, as the scheduler counts them: its capacity less what the
// jobs bound to it (Scheduled or Running) ask for and what the migrations heading there will; and
// per GPU, the 1% blocks and VRAM not bound.
struct GpuRoom {
  int blocks = 0;
  int64_t vram_mib = 0;
};
struct NodeRoom {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  std::vector<GpuRoom> gpus;  // by index
  std::set<std::pair<int, int>> mig_taken;  // (GPU index, start slot) of MIG instances bound or moved to
};
std::map<std::string, NodeRoom> free_room(const ObjectCache& cache);
// What a moving job takes on its target: the binding there, and the MIG instances to add to the
// target's layouts first (GPU index, instance) where none of the profile it holds is free.
struct TargetGpus {
  std::vector<model::GpuBinding> gpus;
  std::vector<std::pair<int, model::MigInstance>> new_instances;
};
// The GPUs `job` would take on `node`: for each GPU it holds on `source`, in order, one of the same
// model. A share or whole GPU goes to a GPU outside MIG with its blocks and VRAM free in `room`
// (the fullest such, to keep whole GPUs free); a MIG instance to a free instance of the same
// profile on a MIG GPU, or to a new one in free slots. An error says what is missing. Empty for a
// job without GPUs.
Result<TargetGpus> migration_target_gpus(const model::Job& job, const model::Node& source, const model::Node& node,
                                         const NodeRoom& room);
// Why `job` cannot move from `source` onto `node` (cordoned, not Ready, no peer endpoint, not
// enough free CPU or memory in `room`; for a job holding GPUs, no GPU checkpoints there or no GPUs
// for it), or "" when it can.
std::string migration_target_refusal(const model::Job& job, const model::Node& source, const model::Node& node,
                                     const NodeRoom& room);

// Where a move takes a job: the node, and the GPUs there.
struct MigrationTarget {
  std::string node;
  TargetGpus gpus;
};
// The node other than `source` that can take `job` with the most free CPU in `room`, and the GPUs
// it takes there (the target of `cnlab migrate` without --to: its user wants room); an error when
// none can.
Result<MigrationTarget> roomiest_migration_target(const ObjectCache& cache, const model::Job& job,
                                                  const model::Node& source, const std::map<std::string, NodeRoom>& room);
// The roomiest target, as above, among the nodes with VRAM free for all that `job` holds on each
// of its GPUs (`holding_mib`, in its binding's order; a vGPU job can hold more than its quota);
// where none has that room, or `holding_mib` is empty, the roomiest for its quotas. The binding
// there keeps its quotas either way.
Result<MigrationTarget> roomiest_migration_target_holding(const ObjectCache& cache, const model::Job& job,
                                                          const model::Node& source,
                                                          const std::map<std::string, NodeRoom>& room,
                                                          const std::vector<int64_t>& holding_mib);
// The node other than `source` that can take `job` and is left fullest by it (the target of a node
// drain's moves, which pack the work as the scheduler's power-down drains do, sched/drain.h): a
// node already running work before an idle one, which stays idle and can power down; then the
// fewest 1% blocks left free on the GPUs it takes there (whole GPUs stay whole); then the smallest
// share of the node's CPU left free. An error when none can take it.
Result<MigrationTarget> packed_migration_target(const ObjectCache& cache, const model::Job& job,
                                                const model::Node& source, const std::map<std::string, NodeRoom>& room);
// Per node, how many jobs moved off it live it still holds frozen: handed over to their target
// (bound there) and not yet running there, so a target that cannot restore one hands it back. From
// the cache `c` (inside ObjectCache::read); nodes that hold none are left out.
std::map<std::string, int64_t> migrations_handed_over(const ObjectCache& c);
// Records a move of running `job` to `target` (status.migration, for the agents to carry out) with
// its MigrationRequested event: "migration from node-a to node-b <how>".
void ask_to_migrate(model::Job& job, const MigrationTarget& target, Time now, const std::string& how);
// Adds MIG instances to node `name`'s layouts (its agent creates them, as for the scheduler's
// repartitions) before a move into them is recorded; compare-and-swap on the stored record.
Status add_mig_instances(store::Store& store, ObjectCache& cache, const std::string& name,
                         const std::vector<std::pair<int, model::MigInstance>>& added, const std::string& audit);

class MigrationWatch {
 public:
  // `checkpoint_every`: priority class -> interval of its periodic checkpoints (none: never).
  // Each move it gives up counts in `migrations` (cnlab_migrations_total{outcome="given_up"}).
  MigrationWatch(store::Store& store, ObjectCache& cache, Duration timeout, std::map<std::string, Duration> checkpoint_every,
                 std::function<Time()> clock, std::function<void()> wake_scheduler, MetricFamily& migrations);
  ~MigrationWatch();
  void start(std::chrono::milliseconds period = std::chrono::seconds(1));
  void stop();
  void check_once();

 private:
  store::Store& store_;
  ObjectCache& cache_;
  Duration timeout_;
  std::map<std::string, Duration> checkpoint_every_;
  std::function<Time()> clock_;
  std::function<void()> wake_scheduler_;
  MetricFamily& migrations_;
  Periodic periodic_;
};

}  // namespace cnlab::server
