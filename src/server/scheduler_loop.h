// The scheduling controller. It keeps the scheduler's snapshot up to date incrementally from the
// cache's change notifications (a changed job or node is re-copied; nothing is rebuilt per cycle),
// runs sched::run_cycle when something changed (debounced) and periodically, and commits the
// decisions with compare-and-swap: one transaction per group of nodes the decisions touch, with the
// jobs' records and the nodes' allocation records, so a decision made on an outdated view loses
// (and is retried on the next cycle) instead of double-booking a slice. Waiting reasons are kept in
// memory, refreshed every cycle, and shown by the API.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "sched/scheduler.h"
#include "server/job_waiting.h"
#include "server/metrics.h"
#include "server/object_cache.h"
#include "server/server.h"
#include "store/store.h"

namespace cnlab::server {

struct CycleReport {
  size_t pending = 0;
  size_t running = 0;
  size_t placed = 0;
  size_t preempted = 0;
  size_t migrated = 0;  // moves for room decided (asked of the agents unless refused)
  size_t conflicts = 0;  // groups whose compare-and-swap lost
  double sync_seconds = 0;
  double cycle_seconds = 0;
  double commit_seconds = 0;
};

class SchedulerLoop {
 public:
  SchedulerLoop(store::Store& store, ObjectCache& cache, Metrics& metrics, const ServerConfig& config,
                std::function<Time()> clock);
  ~SchedulerLoop();

  // Subscribes to the cache (call before the cache starts, so nothing is missed) and starts the
  // loop's thread with `start`.
  void attach();
  void start();
  void stop();
  // Asks for a cycle soon (debounced).
  void wake();

  // One cycle now, on the caller's thread (tests and benchmarks; not while the thread runs).
  CycleReport run_once();

  // The scheduler's latest reason for a pending job, or "".
  std::string waiting_reason(const std::string& job) const;
  // Its reason, queue position and reserved start, as of the latest cycle (empty: not waiting).
  JobWaiting waiting(const std::string& job) const;
  // Whether node `node` had no job bound to it, since when, and whether it could be powered down,
  // as of the latest cycle.
  NodeIdle idle(const std::string& node) const;
  size_t power_down_candidates() const;
  // Holds off the next cycle (one under way finishes first) while the caller decides how a node's
  // free room is spent (`cnlab migrate`), so a cycle never plans with room that is being promised
  // elsewhere and two callers never promise the same room.
  std::unique_lock<std::mutex> hold_decisions() { return std::unique_lock<std::mutex>(decisions_mutex_); }

 private:
  void on_change(const Change& change);
  void sync();
  void upsert_job(const std::string& id, const model::Job* job);
  void upsert_node(const std::string& name, const model::Node* node);
  // Gives every node of the snapshot its idle_since: the node records do not keep it (an agent
  // reports what runs, not since when nothing does), so the loop does, from its first cycle on.
  void note_idle_nodes(Time now);
  size_t commit(const sched::CycleResult& result);
  void loop();

  store::Store& store_;
  ObjectCache& cache_;
  Metrics& metrics_;
  const ServerConfig& config_;
  std::function<Time()> clock_;

  // The snapshot and where each object sits in it.
  sched::Snapshot snapshot_;
  std::unordered_map<std::string, size_t> job_slot_;
  std::unordered_map<std::string, size_t> node_slot_;
  std::vector<int64_t> job_revision_;  // per snapshot job: the revision it was copied at
  std::vector<model::JobPhase> job_stored_phase_;  // Scheduled shows as Running to the scheduler
  Time last_usage_at_{};
  std::mutex decisions_mutex_;  // held by a cycle from its sync to its commit

  std::mutex dirty_mutex_;
  std::set<std::string> dirty_jobs_;
  std::set<std::string> dirty_nodes_;
  bool projects_dirty_ = true;

  mutable std::mutex reasons_mutex_;
  std::unordered_map<std::string, JobWaiting> reasons_;
  std::unordered_map<std::string, NodeIdle> idle_;  // under reasons_mutex_; idle nodes only
  std::unordered_map<std::string, Time> idle_since_;  // the loop's own
  // Pending jobs left out of the snapshot until their nodes release them (job_release.h); they
  // wait with the reason that says so.
  std::unordered_map<std::string, model::PendingRelease> awaiting_release_;

  std::mutex wake_mutex_;
  std::condition_variable wake_cv_;
  bool woken_ = false;
  bool stopping_ = false;
  std::thread thread_;
  std::chrono::steady_clock::duration last_cycle_{};
};

}  // namespace cnlab::server
