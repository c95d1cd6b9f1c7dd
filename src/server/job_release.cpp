#include "server/job_release.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <vector>

#include "server/job_writes.h"

namespace cnlab::server {

void await_release(model::Job& job, Time now) {
  model::PendingRelease pending{{}, now, {}};
  for (const auto& binding : job.status.placement) pending.nodes.push_back(binding.node);
  if (pending.nodes.empty()) return;
  job.status.awaiting_release = std::move(pending);
}

bool awaits_release(const model::Job& job) {
  return job.status.phase == model::JobPhase::kPending && job.status.awaiting_release.has_value();
}

std::string release_wait_reason(const model::PendingRelease& pending, Time now) {
  std::string nodes;
  for (const auto& node : pending.nodes) nodes += (nodes.empty() ? "" : ", ") + node;
  return fmt::format("waiting for node{} {} to stop it and store its checkpoint (pre-empted {} ago)",
                     pending.nodes.size() == 1 ? "" : "s", nodes, format_duration(now - pending.since));
}

bool release_from(model::Job& job, const std::string& node, Time now, const std::string& how) {
  if (!awaits_release(job)) return false;
  auto& nodes = job.status.awaiting_release->nodes;
  auto it = std::find(nodes.begin(), nodes.end(), node);
  if (it == nodes.end()) return false;
  nodes.erase(it);
  auto& released = job.status.awaiting_release->released;
  std::string said = how;  // never longer in practice: a node name and a message of at most 1000 bytes
  if (said.size() > model::kMaxReleaseClause) {
    size_t cut = model::kMaxReleaseClause;
    while (cut > 0 && (static_cast<unsigned char>(said[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 sequence
    said.resize(cut);
  }
  released.push_back(std::move(said));
  if (!nodes.empty()) return true;
  std::string clauses;
  for (const auto& clause : released) clauses += (clauses.empty() ? "" : "; ") + clause;
  job.status.awaiting_release.reset();
  const auto& latest = job.status.checkpoint;
  job.status.events.push_back(
      {model::JobEventType::kReleased, now,
       fmt::format("{}; it starts again {}", clauses,
                   latest ? fmt::format("from its {} checkpoint {} of {}", latest->kind, latest->digest,
                                        format_rfc3339(latest->taken_at))
                          : std::string("from the beginning"))});
  return true;
}

std::map<std::string, int64_t> releases_owed(const ObjectCache& c) {
  std::map<std::string, int64_t> owed;
  c.for_each_job_in(c.jobs_awaiting_release, [&](const std::string&, const model::Job& job) {
    for (const auto& node : job.status.awaiting_release->nodes) ++owed[node];
  });
  return owed;
}

size_t release_stalled(store::Store& store, ObjectCache& cache, Time now, Duration timeout) {
  struct Stalled {
    std::string job;
    std::vector<std::pair<std::string, std::string>> nodes;  // node -> why it is let go
  };
  std::vector<Stalled> stalled;
  cache.read([&](const ObjectCache& c) {
    c.for_each_job_in(c.jobs_awaiting_release, [&](const std::string& id, const model::Job& job) {
      const auto& pending = *job.status.awaiting_release;
      const bool overdue = now - pending.since > timeout;
      Stalled entry{id, {}};
      for (const auto& name : pending.nodes) {
        auto node = c.nodes.get(name);
        if (!node.object) {
          entry.nodes.emplace_back(name, "node " + name + " was deleted");
        } else if (node.object->phase == model::NodePhase::kLost) {
          entry.nodes.emplace_back(name, "node " + name + " was lost");
        } else if (overdue) {
          entry.nodes.emplace_back(name, fmt::format("node {} did not release it within {} (--release-timeout)",
                                                     name, format_duration(timeout)));
        }
      }
      if (!entry.nodes.empty()) stalled.push_back(std::move(entry));
    });
    return 0;
  });
  size_t changed = 0;
  for (const auto& entry : stalled) {
    Json nodes = Json::object();
    for (const auto& [node, why] : entry.nodes) nodes[node] = why;
    Json audit = {{"time", format_rfc3339(now)}, {"actor", "node-lifecycle"}, {"action", "jobs.release"},
                  {"target", entry.job}, {"outcome", "ok"}, {"detail", {{"nodes", nodes}}}};
    auto updated = update_job(
        store, &cache, entry.job,
        [&](model::Job& job) -> Result<bool> {
          bool any = false;
          for (const auto& [node, why] : entry.nodes) any = release_from(job, node, now, why) || any;
          return any;
        },
        audit.dump());
    if (!updated) {
      spdlog::error("release failed job=\"{}\" error=\"{}\"", entry.job, updated.error().to_string());
    } else if (*updated) {
      spdlog::warn("job released without its node job=\"{}\" nodes={}", entry.job, nodes.dump());
      ++changed;
    }
  }
  return changed;
}

}  // namespace cnlab::server
