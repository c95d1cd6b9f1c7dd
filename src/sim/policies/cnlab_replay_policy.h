// CNLab in the replay: the production scheduler's whole cycle, sched::run_cycle, unchanged and
// with its default configuration (or, as "cnlab+moves", with live migration for room on, and as
// "cnlab+drains", with drains for power-down too) (priority tiers, fair share, deadlines, backfill, pre-emption,
// fragmentation-aware packing). This file adds no policy of its own; it only tells the engine when
// the passing of time alone could change the scheduler's mind (wake_up).
#pragma once

#include "sim/replay_policy.h"

namespace cnlab::sim {

class CnlabReplayPolicy : public ReplayPolicy {
 public:
  explicit CnlabReplayPolicy(sched::PolicyConfig config = {}, std::string name = "cnlab")
      : config_(std::move(config)), name_(std::move(name)) {}

  std::string_view name() const override { return name_; }
  sched::CycleResult cycle(const sched::Snapshot& snapshot) override { return sched::run_cycle(snapshot, config_); }
  // The earliest of: a running job of a lower tier reaching its minimum run time while a job that
  // may pre-empt it (its tier may, or it has a deadline) waits; a waiting deadline job becoming
  // urgent (deadline - estimate - deadline_urgency); a reservation's start. Everything else the
  // cycle reads changes only when a job arrives or ends (fair-share decay aside, which reorders
  // but never unblocks).
  std::optional<Time> wake_up(const sched::Snapshot& snapshot, const sched::CycleResult& last) const override;
  // With drains on, a cycle with an empty queue may still empty a node for power-down.
  bool decides_with_nothing_waiting() const override {
    return config_.max_drain_moves_per_cycle > 0 && config_.max_migrations_per_cycle > 0;
  }

 private:
  sched::PolicyConfig config_;
  std::string name_;
};

}  // namespace cnlab::sim
