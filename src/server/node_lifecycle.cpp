#include "server/node_lifecycle.h"

#include <spdlog/spdlog.h>

#include "server/job_release.h"
#include "server/job_writes.h"

namespace cnlab::server {

NodeLifecycle::NodeLifecycle(store::Store& store, ObjectCache& cache, const ServerConfig& config,
                             std::function<Time()> clock, std::function<void()> wake_scheduler)
    : store_(store), cache_(cache), config_(config), clock_(std::move(clock)), wake_scheduler_(std::move(wake_scheduler)) {}

NodeLifecycle::~NodeLifecycle() { stop(); }

void NodeLifecycle::start(std::chrono::milliseconds period) {
  periodic_.start(period, [this] { check_once(); });
}

void NodeLifecycle::stop() { periodic_.stop(); }

size_t NodeLifecycle::check_once() {
  Time now = clock_();
  struct Change {
    std::string node;
    model::NodePhase to;
  };
  std::vector<Change> changes;
  std::vector<std::string> lost_with_jobs;
  cache_.read([&](const ObjectCache& c) {
    c.nodes.for_each([&](const std::string& name, const model::Node& node, int64_t) {
      Time last = node.last_heartbeat.value_or(Time{});
      Duration silent = now - last;
      if (silent > config_.lost_after && node.phase != model::NodePhase::kLost) {
        changes.push_back({name, model::NodePhase::kLost});
      } else if (silent > config_.not_ready_after && silent <= config_.lost_after &&
                 node.phase != model::NodePhase::kNotReady && node.phase != model::NodePhase::kLost) {
        changes.push_back({name, model::NodePhase::kNotReady});
      }
      if (node.phase == model::NodePhase::kLost) {
        // A pass that marked the node Lost may have died before requeueing everything: keep going.
        auto allocation = c.allocations.get(name);
        if (allocation.object && !allocation.object->jobs.empty()) lost_with_jobs.push_back(name);
      }
    });
    return 0;
  });
  size_t changed = 0;
  for (const auto& change : changes) {
    auto record = store_.get(kind::kNodes, change.node);
    if (!record) continue;
    auto node = model::node_from_json(Json::parse(record->value, nullptr, false));
    if (!node) continue;
    node->phase = change.to;
    node->meta.revision = 0;
    Json audit = {{"time", format_rfc3339(now)}, {"actor", "node-lifecycle"}, {"action", "nodes.phase"},
                  {"target", change.node}, {"outcome", "ok"},
                  {"detail", {{"phase", to_string(change.to)},
                              {"last_heartbeat", node->last_heartbeat ? format_rfc3339(*node->last_heartbeat) : ""}}}};
    auto committed = store_.txn({store::Op::update(kind::kNodes, change.node, to_json(*node).dump(), record->mod_revision)},
                                audit.dump());
    if (!committed) continue;  // it heartbeated meanwhile, or someone cordoned it: next pass decides
    for (const auto& r : committed->records) cache_.apply(r);
    spdlog::warn("node phase node=\"{}\" phase={}", change.node, to_string(change.to));
    ++changed;
    if (change.to == model::NodePhase::kLost) requeue_jobs_of(change.node, now);
  }
  for (const auto& node : lost_with_jobs) requeue_jobs_of(node, now);
  const size_t released = release_stalled(store_, cache_, now, config_.release_timeout);
  if (changed || released) wake_scheduler_();
  return changed;
}

void NodeLifecycle::requeue_jobs_of(const std::string& node, Time now) {
  std::vector<std::string> jobs;
  cache_.read([&](const ObjectCache& c) {
    auto allocation = c.allocations.get(node);
    if (allocation.object) {
      for (const auto& [id, gpus] : allocation.object->jobs) jobs.push_back(id);
    }
    return 0;
  });
  for (const auto& id : jobs) {
    Json audit = {{"time", format_rfc3339(now)}, {"actor", "node-lifecycle"}, {"action", "jobs.requeue"},
                  {"target", id}, {"outcome", "ok"}, {"detail", {{"node", node}, {"reason", "node lost"}}}};
    auto updated = update_job(
        store_, &cache_, id,
        [&](model::Job& job) -> Result<bool> {
          if (!holds_gpus(job.status.phase)) return false;
          if (!model::bound_to(job, node)) return false;
          requeue(job, now, "node " + node + " lost");
          return true;
        },
        audit.dump());
    if (!updated) spdlog::error("requeue failed job=\"{}\" node=\"{}\" error=\"{}\"", id, node, updated.error().to_string());
  }
}

}  // namespace cnlab::server
