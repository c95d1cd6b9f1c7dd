#include "server/node_drain.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "server/job_writes.h"
#include "server/migrations.h"

namespace cnlab::server {

NodeDrain::NodeDrain(store::Store& store, ObjectCache& cache,
                     std::function<std::unique_lock<std::mutex>()> hold_scheduler, std::function<Time()> clock)
    : store_(store), cache_(cache), hold_scheduler_(std::move(hold_scheduler)), clock_(std::move(clock)) {}

NodeDrain::~NodeDrain() { stop(); }

void NodeDrain::start(std::chrono::milliseconds period) { periodic_.start(period, [this] { check_once(); }); }

void NodeDrain::stop() { periodic_.stop(); }

std::vector<std::string> NodeDrain::check_once() {
  // Per draining node: its moves under way, and the jobs that may move, smallest memory first.
  struct Draining {
    int in_flight = 0;
    std::vector<std::pair<int64_t, std::string>> movable;  // (memory_mib, job)
  };
  std::map<std::string, Draining> draining;
  auto gather = [&](const ObjectCache& c) {
    c.nodes.for_each([&](const std::string& name, const model::Node& node, int64_t) {
      if (node.phase == model::NodePhase::kDraining) draining[name];
    });
    if (draining.empty()) return 0;
    c.jobs.for_each([&](const std::string& id, const model::Job& job, int64_t) {
      if (job.status.placement.size() != 1) return;
      auto it = draining.find(job.status.migration && !job.status.migration->from.empty() ? job.status.migration->from
                                                                                           : job.status.placement.front().node);
      if (it == draining.end()) return;
      if (job.status.migration) {
        ++it->second.in_flight;
      } else if (job.status.phase == model::JobPhase::kRunning && job.spec.checkpointable && !job.status.cancel_requested) {
        it->second.movable.emplace_back(job.spec.memory_mib, id);
      }
    });
    return 0;
  };
  cache_.read(gather);
  std::vector<std::string> asked;
  std::erase_if(not_moved_, [&](const auto& entry) {  // only jobs still waiting to move are remembered
    return std::none_of(draining.begin(), draining.end(), [&](const auto& d) {
      return std::any_of(d.second.movable.begin(), d.second.movable.end(),
                         [&](const auto& m) { return m.second == entry.first; });
    });
  });
  if (draining.empty()) return asked;
  const Time now = clock_();
  auto no_cycle = hold_scheduler_();
  for (auto& [node, d] : draining) {
    std::sort(d.movable.begin(), d.movable.end());
    for (const auto& [memory, id] : d.movable) {
      if (d.in_flight >= kDrainMovesInFlight) break;
      if (move_off(id, node, now)) {
        ++d.in_flight;
        asked.push_back(id);
      }
    }
  }
  return asked;
}

bool NodeDrain::move_off(const std::string& id, const std::string& node, Time now) {
  auto chosen = cache_.read([&](const ObjectCache& c) -> Result<MigrationTarget> {
    auto job = c.jobs.get(id);
    auto from = c.nodes.get(node);
    if (!job.object || !from.object) return Error::not_found("job", id, "gone");
    if (std::string why = migration_refusal(*job.object, from.object.get()); !why.empty()) {
      return Error::failed_precondition(why);
    }
    // A move that just failed (its target could not restore it, say) is not asked again at once.
    const auto& events = job.object->status.events;
    auto failed = std::find_if(events.rbegin(), events.rend(),
                               [](const auto& e) { return e.type == model::JobEventType::kMigrationFailed; });
    if (failed != events.rend() && now - failed->time < kDrainRetryAfter) {
      return Error::failed_precondition(fmt::format("its last move failed {} ago; the drain tries again {} after",
                                                    format_duration(now - failed->time), format_duration(kDrainRetryAfter)));
    }
    return roomiest_migration_target(c, *job.object, *from.object, free_room(c));
  });
  auto not_now = [&](const std::string& why) {
    auto [it, first] = not_moved_.try_emplace(id, why);
    if (first || it->second != why) {
      it->second = why;
      spdlog::info("drain: job not moved off node=\"{}\" job=\"{}\" reason=\"{}\"", node, id, why);
    }
    return false;
  };
  if (!chosen) return not_now(chosen.error().message);
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
      return not_now(added.error().message);
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

}  // namespace cnlab::server
