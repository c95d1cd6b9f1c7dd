#include "server/idle_reclaim.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/strings.h"
#include "server/job_writes.h"

namespace cnlab::server {

IdleReclaim::IdleReclaim(store::Store& store, ObjectCache& cache, std::map<std::string, Duration> limits,
                         std::function<Time()> clock)
    : store_(store), cache_(cache), limits_(std::move(limits)), clock_(std::move(clock)) {}

IdleReclaim::~IdleReclaim() { stop(); }

void IdleReclaim::start(std::chrono::milliseconds period) {
  if (!limits_.empty()) periodic_.start(period, [this] { check_once(); });
}

void IdleReclaim::stop() { periodic_.stop(); }

std::vector<std::string> IdleReclaim::check_once() {
  const Time now = clock_();
  struct Idle {
    std::string job;
    Duration idle;
    Duration limit;
    std::string cls;
  };
  std::vector<Idle> idle;
  cache_.read([&](const ObjectCache& c) {
    c.for_each_job_in(c.jobs_holding_gpus, [&](const std::string& id, const model::Job& job) {
      if (job.status.phase != model::JobPhase::kRunning || job.status.cancel_requested || !job.status.started_at) return;
      auto limit = limits_.find(job.spec.priority_class);
      if (limit == limits_.end()) return;
      bool gpus = false, simulated = false;
      for (const auto& binding : job.status.placement) {
        gpus |= !binding.gpus.empty();
        auto node = c.nodes.get(binding.node);
        if (node.object && node.object->simulated) simulated = true;
      }
      if (!gpus || simulated) return;
      Time since = std::max(*job.status.started_at, job.status.gpu_active_at.value_or(Time{}));
      if (now - since > limit->second) idle.push_back({id, now - since, limit->second, limit->first});
    });
    return 0;
  });
  std::vector<std::string> reclaimed;
  for (const Idle& i : idle) {
    std::string why = fmt::format("reclaimed: its GPU slice was idle for {} ({} jobs may idle {})", format_duration(i.idle),
                                  i.cls, format_duration(i.limit));
    Json audit = {{"time", format_rfc3339(now)}, {"actor", "idle-reclaim"}, {"action", "jobs.reclaim"}, {"target", i.job},
                  {"outcome", "ok"}, {"detail", {{"idle", format_duration(i.idle)}, {"limit", format_duration(i.limit)}}}};
    auto updated = update_job(
        store_, &cache_, i.job,
        [&](model::Job& job) -> Result<bool> {
          if (job.status.phase != model::JobPhase::kRunning || job.status.cancel_requested) return false;
          Time since = std::max(job.status.started_at.value_or(now), job.status.gpu_active_at.value_or(Time{}));
          if (now - since <= i.limit) return false;  // it was used meanwhile
          job.status.cancel_requested = true;  // its agent stops it; the job ends Cancelled
          job.status.message = why;
          job.status.events.push_back({model::JobEventType::kIdleReclaimed, now, why});
          return true;
        },
        audit.dump());
    if (!updated) {
      spdlog::error("idle reclaim failed job=\"{}\" error=\"{}\"", i.job, updated.error().to_string());
    } else if (*updated) {
      spdlog::info("idle slice reclaimed job=\"{}\" idle={}", i.job, format_duration(i.idle));
      reclaimed.push_back(i.job);
    }
  }
  return reclaimed;
}

Result<std::map<std::string, Duration>> parse_idle_limits(std::string_view text, std::string_view flag) {
  std::map<std::string, Duration> limits;
  if (text == "none" || text.empty()) return limits;
  static const char* const kClasses[] = {"inference", "production", "dev", "opportunistic"};
  for (std::string_view part : split(text, ',')) {
    size_t eq = part.find('=');
    if (eq == std::string_view::npos) {
      return Error::invalid_argument(std::string(flag), std::string(part), "expected CLASS=DURATION, such as dev=2h");
    }
    std::string cls(part.substr(0, eq));
    bool known = false;
    for (const char* k : kClasses) known |= cls == k;
    if (!known) {
      return Error::invalid_argument(std::string(flag), cls, "classes are inference, production, dev and opportunistic");
    }
    auto d = parse_duration(part.substr(eq + 1), flag);
    if (!d) return d.error();
    if (*d <= Duration{0}) return Error::invalid_argument(std::string(flag), std::string(part), "the duration must be positive");
    limits[cls] = *d;
  }
  return limits;
}

}  // namespace cnlab::server
