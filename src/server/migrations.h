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
#include <string>

#include "model/job.h"
#include "server/object_cache.h"
#include "server/periodic.h"
#include "store/store.h"

namespace cnlab::server {

// The source's dump of a migrating job is stored: bind it to the target (phase Scheduled, its run
// time kept). Only single-node jobs without GPUs migrate (see migration_refusal).
void bind_to_migration_target(model::Job& job, const std::string& source, int64_t frozen_at_ms, Time now);
// Gives a migrating job back to its source (bound there, Running), with a MigrationFailed event.
void roll_back_migration(model::Job& job, Time now, const std::string& why);
// Why `job` cannot migrate now, or "" when it can.
std::string migration_refusal(const model::Job& job);

// Host CPU and memory each node has free, as the scheduler counts them: its capacity less what the
// jobs bound to it (Scheduled or Running) ask for and what the migrations heading there will.
struct NodeRoom {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
};
std::map<std::string, NodeRoom> free_room(const ObjectCache& cache);
// Why `job` cannot move onto `node` (cordoned, not Ready, no peer endpoint, not enough free CPU
// or memory in `room`), or "" when it can.
std::string migration_target_refusal(const model::Job& job, const model::Node& node, const NodeRoom& room);

class MigrationWatch {
 public:
  // `checkpoint_every`: priority class -> interval of its periodic checkpoints (none: never).
  MigrationWatch(store::Store& store, ObjectCache& cache, Duration timeout, std::map<std::string, Duration> checkpoint_every,
                 std::function<Time()> clock, std::function<void()> wake_scheduler);
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
  Periodic periodic_;
};

}  // namespace cnlab::server
