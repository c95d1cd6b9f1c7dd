#include "sched/apply.h"

namespace cnlab::sched {
namespace {

// The bindings `grants` name; the nodes they touch are no longer idle.
std::vector<model::NodeBinding> bind(const std::vector<NodeGrant>& grants, Snapshot& snapshot) {
  std::vector<model::NodeBinding> placement;
  for (const NodeGrant& grant : grants) {
    model::NodeBinding binding{snapshot.nodes[grant.node].meta.name, {}};
    for (const GpuGrant& g : grant.gpus) binding.gpus.push_back({g.gpu, g.blocks, g.vram_mib, g.mig_start});
    placement.push_back(std::move(binding));
    snapshot.nodes[grant.node].idle_since.reset();
  }
  return placement;
}

}  // namespace

void apply_decisions(const CycleResult& result, Snapshot& snapshot) {
  for (const Preemption& p : result.preemptions) {
    model::Job& victim = snapshot.jobs[p.victim];
    victim.status.phase = model::JobPhase::kPending;
    victim.status.placement.clear();
    victim.status.started_at.reset();
    victim.status.message = "pre-empted by job " + snapshot.jobs[p.for_job].meta.name;
  }
  for (const Migration& m : result.migrations) {
    model::Job& job = snapshot.jobs[m.job];
    std::string why = m.reason == MoveReason::kDrain
                          ? "moved to empty node " + (job.status.placement.empty() ? std::string("?") : job.status.placement.front().node) +
                                " for power-down"
                          : "moved for job " + snapshot.jobs[m.for_job].meta.name;
    job.status.placement = bind(m.to, snapshot);
    job.status.events.push_back({model::JobEventType::kMigrated, snapshot.now, std::move(why)});
  }
  for (const Repartition& r : result.repartitions) {
    model::Gpu& gpu = snapshot.nodes[r.node].gpus[r.gpu];
    gpu.mig_enabled = r.mig_enabled;
    gpu.mig_instances = r.instances;
  }
  for (const Placement& p : result.placements) {
    model::Job& job = snapshot.jobs[p.job];
    job.status.phase = model::JobPhase::kRunning;
    job.status.started_at = snapshot.now;
    job.status.placement = bind(p.nodes, snapshot);
  }
}

}  // namespace cnlab::sched
