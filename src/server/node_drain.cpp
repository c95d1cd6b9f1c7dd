#include "server/node_drain.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "server/job_writes.h"
#include "server/migrations.h"

namespace cnlab::server {

NodeDrain::NodeDrain(store::Store& store, ObjectCache& cache,
                     std::function<std::unique_lock<std::mutex>()> hold_scheduler, std::function<void()> wake_scheduler,
                     std::function<Time()> clock)
    : store_(store),
      cache_(cache),
      hold_scheduler_(std::move(hold_scheduler)),
      wake_scheduler_(std::move(wake_scheduler)),
      clock_(std::move(clock)) {}

NodeDrain::~NodeDrain() { stop(); }

void NodeDrain::start(std::chrono::milliseconds period) { periodic_.start(period, [this] { check_once(); }); }

void NodeDrain::stop() { periodic_.stop(); }

std::vector<std::string> NodeDrain::check_once() {
  // Per draining node: its moves under way, the jobs that may move (smallest memory first), those
  // that never move, and those not started yet.
  struct Draining {
    bool requeues = false;  // drained with --requeue: what cannot move live is requeued
    int in_flight = 0;
    std::vector<std::pair<int64_t, std::string>> movable;  // (memory the move copies, job)
    std::vector<std::pair<std::string, std::string>> staying;  // (job, why it never moves)
    std::set<std::string> unstarted;  // bound there, not started yet: requeued to start elsewhere
  };
  std::map<std::string, Draining> draining;
  auto gather = [&](const ObjectCache& c) {
    c.nodes.for_each([&](const std::string& name, const model::Node& node, int64_t) {
      if (node.phase == model::NodePhase::kDraining) draining[name].requeues = node.drain_requeues;
    });
    if (draining.empty()) return 0;
    // Only jobs that hold GPUs or are moving can stand in a drain's way.
    auto visit = [&](const std::string& id, const model::Job& job) {
      if (job.status.placement.empty()) return;
      if (job.status.phase == model::JobPhase::kScheduled && !job.status.migration) {
        for (const auto& binding : job.status.placement) {
          if (auto it = draining.find(binding.node); it != draining.end()) it->second.unstarted.insert(id);
        }
        return;
      }
      if (job.status.placement.size() > 1) {  // a gang: it runs to its end wherever it is
        if (job.status.phase != model::JobPhase::kRunning) return;
        for (const auto& binding : job.status.placement) {
          if (auto it = draining.find(binding.node); it != draining.end()) {
            it->second.staying.emplace_back(id, migration_refusal(job, nullptr));
          }
        }
        return;
      }
      auto it = draining.find(job.status.migration && !job.status.migration->from.empty() ? job.status.migration->from
                                                                                           : job.status.placement.front().node);
      if (it == draining.end()) return;
      if (job.status.migration) {
        ++it->second.in_flight;
      } else if (job.status.phase == model::JobPhase::kRunning && !job.status.cancel_requested) {
        if (job.spec.checkpointable) {
          it->second.movable.emplace_back(model::memory_to_move_mib(job), id);
        } else {
          it->second.staying.emplace_back(id, migration_refusal(job, nullptr));
        }
      }
    };
    c.for_each_job_in(c.jobs_holding_gpus, visit);
    c.for_each_job_in(c.jobs_migrating, [&](const std::string& id, const model::Job& job) {
      if (!holds_gpus(job.status.phase)) visit(id, job);
    });
    return 0;
  };
  cache_.read(gather);
  std::vector<std::string> asked;
  std::erase_if(not_moved_, [&](const auto& entry) {  // only jobs still on a draining node are remembered
    return std::none_of(draining.begin(), draining.end(), [&](const auto& d) {
      return std::any_of(d.second.movable.begin(), d.second.movable.end(),
                         [&](const auto& m) { return m.second == entry.first; }) ||
             std::any_of(d.second.staying.begin(), d.second.staying.end(),
                         [&](const auto& s) { return s.first == entry.first; });
    });
  });
  if (draining.empty()) return asked;
  const Time now = clock_();
  for (const auto& [node, d] : draining) {
    for (const auto& id : d.unstarted) requeue_unstarted(id, node, now);
    for (const auto& [id, why] : d.staying) cannot_move(id, node, d.requeues, NotMoved::kNever, why, now);
  }
  auto no_cycle = hold_scheduler_();
  for (auto& [node, d] : draining) {
    std::sort(d.movable.begin(), d.movable.end());
    for (const auto& [memory, id] : d.movable) {
      if (d.in_flight >= kDrainMovesInFlight) break;
      if (move_off(id, node, d.requeues, now)) {
        ++d.in_flight;
        asked.push_back(id);
      }
    }
  }
  return asked;
}

bool NodeDrain::move_off(const std::string& id, const std::string& node, bool requeues, Time now) {
  std::pair<NotMoved, std::string> refused{NotMoved::kNotYet, ""};
  auto chosen = cache_.read([&](const ObjectCache& c) -> std::optional<MigrationTarget> {
    auto job = c.jobs.get(id);
    auto from = c.nodes.get(node);
    if (!job.object || !from.object) return std::nullopt;
    if (std::string why = migration_refusal(*job.object, from.object.get()); !why.empty()) {
      refused = {NotMoved::kNever, why};
      return std::nullopt;
    }
    // A move that just failed (its target could not restore it, say) is not asked again at once.
    const auto& events = job.object->status.events;
    auto failed = std::find_if(events.rbegin(), events.rend(),
                               [](const auto& e) { return e.type == model::JobEventType::kMigrationFailed; });
    if (failed != events.rend() && now - failed->time < kDrainRetryAfter) {
      refused = {NotMoved::kNotAgainYet, fmt::format("its last move failed; the drain tries again {} after it",
                                             format_duration(kDrainRetryAfter))};
      return std::nullopt;
    }
    auto target = packed_migration_target(c, *job.object, *from.object, free_room(c));
    if (!target) {
      refused = {NotMoved::kNotYet, target.error().message};
      return std::nullopt;
    }
    return *target;
  });
  if (!chosen) {
    if (!refused.second.empty()) cannot_move(id, node, requeues, refused.first, refused.second, now);
    return false;
  }
  Json audit = {{"time", format_rfc3339(now)}, {"actor", "node-drain"}, {"action", "jobs.migrate"}, {"target", id},
                {"outcome", "ok"}, {"detail", {{"from", node}, {"to", chosen->node}, {"for", "drain of " + node}}}};
  if (!chosen->gpus.new_instances.empty()) {
    Json instances = Json::array();
    for (const auto& [index, instance] : chosen->gpus.new_instances) {
      instances.push_back({{"gpu", index}, {"profile", instance.profile}, {"start", instance.start}});
    }
    Json layout_audit = {{"time", format_rfc3339(now)}, {"actor", "node-drain"}, {"action", "nodes.mig_layout"},
                         {"target", chosen->node}, {"outcome", "ok"}, {"detail", {{"job", id}, {"added", instances}}}};
    if (auto added = add_mig_instances(store_, cache_, chosen->node, chosen->gpus.new_instances, layout_audit.dump());
        !added) {
      cannot_move(id, node, requeues, NotMoved::kNotYet, added.error().message, now);
      return false;
    }
  }
  auto updated = update_job(
      store_, &cache_, id,
      [&](model::Job& job) -> Result<bool> {
        // Checked again on the stored record: it may have ended, moved or been cancelled meanwhile.
        if (!migration_refusal(job, nullptr).empty() || job.status.placement.front().node != node) return false;
        ask_to_migrate(job, *chosen, now, "to drain " + node);
        return true;
      },
      audit.dump());
  if (!updated) {
    spdlog::error("drain: move not asked job=\"{}\" node=\"{}\" error=\"{}\"", id, node, updated.error().to_string());
    return false;
  }
  if (!updated->has_value()) return false;
  not_moved_.erase(id);
  spdlog::info("drain: job asked to move off node=\"{}\" job=\"{}\" to=\"{}\"", node, id, chosen->node);
  return true;
}

void NodeDrain::requeue_unstarted(const std::string& id, const std::string& node, Time now) {
  Json audit = {{"time", format_rfc3339(now)}, {"actor", "node-drain"}, {"action", "jobs.requeue"}, {"target", id},
                {"outcome", "ok"}, {"detail", {{"node", node}, {"for", "drain of " + node}}}};
  auto requeued = update_job(
      store_, &cache_, id,
      [&](model::Job& job) -> Result<bool> {
        // Checked again on the stored record: started meanwhile, it moves or stays as running jobs do.
        const bool here = model::bound_to(job, node);
        if (job.status.phase != model::JobPhase::kScheduled || job.status.migration || !here) return false;
        requeue(job, now, "node " + node + " drains, and the job had not started there");
        return true;
      },
      audit.dump());
  if (!requeued) {
    spdlog::error("drain: job not requeued job=\"{}\" node=\"{}\" error=\"{}\"", id, node, requeued.error().to_string());
  } else if (requeued->has_value()) {
    spdlog::info("drain: job requeued before it started node=\"{}\" job=\"{}\"", node, id);
    wake_scheduler_();
  }
}

void NodeDrain::cannot_move(const std::string& id, const std::string& node, bool requeues, NotMoved kind,
                            const std::string& why, Time now) {
  if (requeues) {
    requeue_off(id, node, why, now);
  } else {
    not_moved(id, node, kind, why, now);
  }
}

void NodeDrain::requeue_off(const std::string& id, const std::string& node, const std::string& why, Time now) {
  Json audit = {{"time", format_rfc3339(now)}, {"actor", "node-drain"}, {"action", "jobs.requeue"}, {"target", id},
                {"outcome", "ok"}, {"detail", {{"node", node}, {"for", "drain of " + node}, {"reason", why}}}};
  auto requeued = update_job(
      store_, &cache_, id,
      [&](model::Job& job) -> Result<bool> {
        // Checked again on the stored record: it may have ended, moved or been cancelled meanwhile.
        const bool here = model::bound_to(job, node);
        if (job.status.phase != model::JobPhase::kRunning || job.status.migration || job.status.cancel_requested ||
            !here) {
          return false;
        }
        preempt(job, now,
                fmt::format("node {} drains with --requeue, and the job cannot move live: {}; requeued to {}", node, why,
                            job.spec.checkpointable ? "resume from the checkpoint taken as it stops"
                                                    : "start again from the beginning"));
        return true;
      },
      audit.dump());
  if (!requeued) {
    spdlog::error("drain: job not requeued job=\"{}\" node=\"{}\" error=\"{}\"", id, node, requeued.error().to_string());
  } else if (requeued->has_value()) {
    not_moved_.erase(id);
    spdlog::info("drain: job requeued node=\"{}\" job=\"{}\" reason=\"{}\"", node, id, why);
    wake_scheduler_();
  }
}

void NodeDrain::not_moved(const std::string& id, const std::string& node, NotMoved kind, const std::string& why,
                          Time now) {
  auto [it, first] = not_moved_.try_emplace(id, why);
  if (!first && it->second == why) return;
  it->second = why;
  spdlog::info("drain: job not moved off node=\"{}\" job=\"{}\" reason=\"{}\"", node, id, why);
  if (kind == NotMoved::kNotAgainYet) return;  // its MigrationFailed event says why already
  const std::string reason =
      kind == NotMoved::kNotYet
          ? fmt::format("node {} drains; the job moves off it once it can: {}", node, why)
          : fmt::format("node {} drains, and the job cannot move: {}; it runs to its end there", node, why);
  auto noted = update_job(
      store_, &cache_, id,
      [&](model::Job& job) -> Result<bool> {
        // Said once per reason, also across a restart of the server (which empties not_moved_).
        const auto& events = job.status.events;
        if (!events.empty() && events.back().type == model::JobEventType::kNotMovedForDrain &&
            events.back().reason == reason) {
          return false;
        }
        job.status.events.push_back({model::JobEventType::kNotMovedForDrain, now, reason});
        return true;
      },
      std::nullopt);
  if (!noted) spdlog::warn("drain: job event not written job=\"{}\" error=\"{}\"", id, noted.error().to_string());
}

}  // namespace cnlab::server
