// An operator's drain (POST /v1/nodes/{name}/drain, `cnlab admin node drain`) empties the node of
// the work that can move: each Running checkpointable job on it migrates live to another node, the
// one it leaves fullest (packed_migration_target: busy nodes before idle ones; a job holding GPUs
// only between nodes that checkpoint GPU state). What cannot move (not checkpointable, a gang,
// GPUs without GPU checkpoints) runs to its end there, as on a cordoned node; a job no node has
// room for yet is tried again on the next pass, as other work ends, and one whose move failed (it
// carries on where it was) after kDrainRetryAfter. Each job that stays says why in a
// NotMovedForDrain event, once per reason. A job bound there that has not started yet is requeued
// (Preempted: "node X drains, and the job had not started there"), as Kubernetes evicts a pod
// before it runs: it starts elsewhere instead of starting only to be moved or waited for.
//
// A drain with requeue (`cnlab admin node drain --requeue`, Node::drain_requeues) empties the node
// as `kubectl drain` does: what cannot move live now (for whatever reason above) is pre-empted back
// to the queue instead of staying. A checkpointable job is dumped, or saves itself on SIGUSR1, as
// it stops, and resumes elsewhere from that checkpoint; the rest start again.
//
// At most kDrainMovesInFlight moves leave one node at once, smallest memory first: each freezes its
// job and copies it, and a drain of many jobs at once would freeze them all together and fight for
// the same links. A pass holds the scheduler's decisions, as `cnlab migrate` does, so that no cycle
// spends the room a move counts on.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "server/object_cache.h"
#include "server/periodic.h"
#include "store/store.h"

namespace cnlab::server {

inline constexpr int kDrainMovesInFlight = 2;
// A job whose move failed is asked to move again only this long after, not on every pass.
inline constexpr Duration kDrainRetryAfter = std::chrono::seconds(30);

class NodeDrain {
 public:
  NodeDrain(store::Store& store, ObjectCache& cache, std::function<std::unique_lock<std::mutex>()> hold_scheduler,
            std::function<void()> wake_scheduler, std::function<Time()> clock);
  ~NodeDrain();
  void start(std::chrono::milliseconds period = std::chrono::seconds(1));
  void stop();
  // One pass now; returns the jobs it asked to move.
  std::vector<std::string> check_once();

 private:
  // Asks one job to move off draining node `node`; false where it cannot now (then, with
  // `requeues`, it is requeued instead).
  bool move_off(const std::string& id, const std::string& node, bool requeues, Time now);
  // Takes job `id`, bound to draining `node` and not started, back to the queue.
  void requeue_unstarted(const std::string& id, const std::string& node, Time now);
  // Why a job is not moved now: it never will be (it runs to its end there), not yet (no room
  // elsewhere), or not again yet (its last move failed; its MigrationFailed event says why).
  enum class NotMoved { kNever, kNotYet, kNotAgainYet };
  // Says why job `id` is not moved off draining `node`, once per reason: in the server's log and,
  // but for kNotAgainYet, as a NotMovedForDrain event on the job (what `cnlab describe` shows).
  void not_moved(const std::string& id, const std::string& node, NotMoved kind, const std::string& why, Time now);
  // A job that cannot move live off draining `node` now: requeued where the drain `requeues`,
  // else not_moved.
  void cannot_move(const std::string& id, const std::string& node, bool requeues, NotMoved kind,
                   const std::string& why, Time now);
  // Takes running job `id` off draining `node` back to the queue, as a pre-emption: a
  // checkpointable one resumes from the checkpoint its agent takes as it stops (job_release.h).
  void requeue_off(const std::string& id, const std::string& node, const std::string& why, Time now);

  store::Store& store_;
  ObjectCache& cache_;
  std::function<std::unique_lock<std::mutex>()> hold_scheduler_;
  std::function<void()> wake_scheduler_;
  std::function<Time()> clock_;
  std::map<std::string, std::string> not_moved_;  // job -> why, as last logged
  Periodic periodic_;
};

}  // namespace cnlab::server
