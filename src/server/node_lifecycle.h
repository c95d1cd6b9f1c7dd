// Node lifecycle: a node whose agent has been silent past `not_ready_after` becomes NotReady (no
// new work); past `lost_after`, Lost, and every job it held is requeued (a checkpointable job to
// resume from its latest checkpoint; a job being cancelled ends Cancelled). A heartbeat brings a
// node back (the heartbeat handler does that). Each pass also lets go of pre-empted jobs still
// waiting for a node that is lost, or past --release-timeout (job_release.h).
#pragma once

#include <functional>
#include <mutex>

#include "server/object_cache.h"
#include "server/periodic.h"
#include "server/server.h"
#include "store/store.h"

namespace cnlab::server {

class NodeLifecycle {
 public:
  NodeLifecycle(store::Store& store, ObjectCache& cache, const ServerConfig& config, std::function<Time()> clock,
                std::function<void()> wake_scheduler);
  ~NodeLifecycle();
  void start(std::chrono::milliseconds period = std::chrono::milliseconds(1000));
  void stop();
  // One pass now; returns how many nodes changed phase.
  size_t check_once();

 private:
  void requeue_jobs_of(const std::string& node, Time now);

  store::Store& store_;
  ObjectCache& cache_;
  const ServerConfig& config_;
  std::function<Time()> clock_;
  std::function<void()> wake_scheduler_;
  Periodic periodic_;
};

}  // namespace cnlab::server
