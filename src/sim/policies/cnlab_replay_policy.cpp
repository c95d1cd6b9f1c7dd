#include "sim/policies/cnlab_replay_policy.h"

#include <algorithm>

namespace cnlab::sim {

std::optional<Time> CnlabReplayPolicy::wake_up(const sched::Snapshot& snapshot, const sched::CycleResult& last) const {
  const Time now = snapshot.now;
  std::optional<Time> wake;
  auto consider = [&](Time t) {
    if (t > now && (!wake || t < *wake)) wake = t;
  };
  const int lowest = static_cast<int>(config_.tiers.size()) - 1;
  auto tier_of = [&](const model::Job& job) {
    int tier = config_.tier_index(job.spec.priority_class);
    return tier < 0 ? lowest : tier;  // as run_cycle treats an unknown class
  };

  int preempting_tier = lowest + 1;  // the highest tier with a waiting job that may pre-empt
  for (const model::Job& job : snapshot.jobs) {
    if (job.status.phase != model::JobPhase::kPending) continue;
    int tier = tier_of(job);
    if (config_.tiers[static_cast<size_t>(tier)].may_preempt || job.spec.deadline) {
      preempting_tier = std::min(preempting_tier, tier);
    }
    if (job.spec.deadline && job.spec.estimated_duration) {
      consider(*job.spec.deadline - *job.spec.estimated_duration - config_.deadline_urgency);
    }
  }
  if (preempting_tier <= lowest) {
    for (const model::Job& job : snapshot.jobs) {
      if (job.status.phase != model::JobPhase::kRunning || !job.status.started_at) continue;
      int tier = tier_of(job);
      if (tier <= preempting_tier) continue;
      consider(*job.status.started_at +
               job.spec.min_runtime.value_or(config_.tiers[static_cast<size_t>(tier)].min_runtime));
    }
  }
  for (const sched::Reservation& r : last.reservations) consider(r.start);
  return wake;
}

}  // namespace cnlab::sim
