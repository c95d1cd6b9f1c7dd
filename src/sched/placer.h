// Incremental placement: the cycle's placement search and scoring, one job at a time, against a
// cluster the caller keeps (the simulator's allocation experiment). No queue, no time: every job
// is placed now or not at all, and stays until released (a migration moves it: release, then place
// again). For the same cluster and the same jobs
// arrived, it chooses what run_cycle would choose for the next job.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "model/model.h"
#include "sched/decision.h"
#include "sched/policy_config.h"

namespace cnlab::sched {

class Placer {
 public:
  Placer(std::vector<model::Node> nodes, PolicyConfig config = {});
  ~Placer();
  Placer(const Placer&) = delete;
  Placer& operator=(const Placer&) = delete;

  const std::vector<model::Node>& nodes() const;
  // Records that a job asking `spec` arrived; placement learns the workload's shape from arrivals
  // (placed or not), as the cycle learns it from its running and pending jobs.
  void observe(const model::JobSpec& spec);
  // Finds the best place for `spec` now and takes it, or returns nullopt when it fits nowhere.
  // Grants are as in a cycle's Placement (MIG changes are applied to nodes()).
  std::optional<std::vector<NodeGrant>> place(const model::JobSpec& spec, JobIndex job);
  // The same, on node `node` only (a single-node job): where a migration has just made room.
  std::optional<std::vector<NodeGrant>> place_on(const model::JobSpec& spec, uint32_t node, JobIndex job);
  // Takes exactly the GPUs `gpu_indexes` (a bit per GPU index of `node`; none for a host-only job)
  // for a single-node block, whole-GPU or host-only job, unscored: where a planned re-pack puts it.
  // nullopt, changing nothing, when it does not fit there (or the kind is MIG).
  std::optional<std::vector<NodeGrant>> place_at(const model::JobSpec& spec, uint32_t node, uint32_t gpu_indexes,
                                                 JobIndex job);
  // Gives back what `job` holds (it moves, or leaves); restore() takes it again, exactly where it
  // was (to undo a tentative release). Both no-ops for a job that holds nothing.
  void release(JobIndex job);
  void restore(JobIndex job);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cnlab::sched
