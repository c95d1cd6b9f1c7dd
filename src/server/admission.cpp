#include "server/admission.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

namespace cnlab::server {
namespace {

bool active(model::JobPhase phase) {
  return phase == model::JobPhase::kPending || phase == model::JobPhase::kScheduled ||
         phase == model::JobPhase::kRunning;
}

// The one model a request names, or -1 (any model, or a choice of several).
int single_model(const model::SliceRequest& request) {
  if (request.models == 0 || std::popcount(request.models) != 1) return -1;
  return std::countr_zero(request.models);
}

std::string gpus_text(int64_t blocks) { return fmt::format("{:g}", static_cast<double>(blocks) / model::kBlocksPerGpu); }

Error over_quota(const model::Quota& quota, const std::string& resource, const std::string& asked,
                 const std::string& used, const std::string& limit) {
  std::string scope = quota.user.empty() ? "project " + quota.project : "user " + quota.user + " in project " + quota.project;
  return Error::of(ErrorCode::kFailedPrecondition, "quota." + quota.meta.name + "." + resource, asked,
                   fmt::format("over quota \"{}\" ({}): {} asked {}, used {}, limit {}", quota.meta.name, scope, resource,
                               asked, used, limit));
}

}  // namespace

QuotaLedger::Contribution QuotaLedger::contribution_of(const model::Job& job) {
  Contribution c;
  c.project = job.spec.project;
  c.user = job.spec.user;
  c.active = active(job.status.phase);
  c.blocks = job.spec.gpu.total_blocks();
  c.model = single_model(job.spec.gpu);
  c.started = job.status.started_at;
  c.finished = job.status.finished_at;
  return c;
}

void QuotaLedger::add(const Contribution& c, int sign) {
  if (!c.active) return;
  for (const auto& key : {std::pair{c.project, std::string()}, std::pair{c.project, c.user}}) {
    Usage& u = usage_[key];
    u.jobs += sign;
    u.blocks += sign * c.blocks;
    if (c.model >= 0) u.blocks_by_model[c.model] += sign * c.blocks;
  }
}

void QuotaLedger::observe(const std::string& id, const model::Job* job) {
  std::lock_guard lock(mutex_);
  auto it = by_job_.find(id);
  if (it != by_job_.end()) {
    add(it->second, -1);
    if (!job) {
      jobs_of_project_[it->second.project].erase(id);
      by_job_.erase(it);
      return;
    }
  }
  if (!job) return;
  Contribution c = contribution_of(*job);
  add(c, +1);
  jobs_of_project_[c.project].insert(id);
  by_job_[id] = std::move(c);
}

void QuotaLedger::release(const std::string& id) { observe(id, nullptr); }

double QuotaLedger::gpu_hours(const std::string& project, const std::string& user, Duration window, Time now) const {
  double hours = 0;
  auto jobs = jobs_of_project_.find(project);
  if (jobs == jobs_of_project_.end()) return 0;
  Time from = now - window;
  for (const std::string& id : jobs->second) {
    const Contribution& c = by_job_.at(id);
    if (!c.started || (!user.empty() && c.user != user)) continue;
    Time start = std::max(*c.started, from);
    Time end = std::min(c.finished.value_or(now), now);
    if (end <= start) continue;
    hours += static_cast<double>((end - start).count()) / 3600.0 * static_cast<double>(c.blocks) / model::kBlocksPerGpu;
  }
  return hours;
}

Result<QuotaLedger::Admitted> QuotaLedger::admit(const std::string& id, const model::Job& job,
                                                 const std::vector<model::Quota>& quotas, Time now) {
  std::lock_guard lock(mutex_);
  Contribution c = contribution_of(job);
  Admitted admitted;
  for (const model::Quota& quota : quotas) {
    if (quota.project != job.spec.project || (!quota.user.empty() && quota.user != job.spec.user)) continue;
    const Usage& u = usage_[{quota.project, quota.user}];
    std::optional<Error> over;
    if (quota.concurrent_jobs && u.jobs + 1 > *quota.concurrent_jobs) {
      over = over_quota(quota, "concurrent_jobs", "1", std::to_string(u.jobs), std::to_string(*quota.concurrent_jobs));
    } else if (quota.gpus && u.blocks + c.blocks > *quota.gpus * model::kBlocksPerGpu) {
      over = over_quota(quota, "gpus", gpus_text(c.blocks), gpus_text(u.blocks), std::to_string(*quota.gpus));
    } else if (c.model >= 0) {
      std::string name(model::gpu_model(static_cast<model::ModelId>(c.model)).name);
      auto limit = quota.blocks_per_model.find(name);
      if (limit != quota.blocks_per_model.end()) {
        auto used_it = u.blocks_by_model.find(c.model);
        int64_t used = used_it == u.blocks_by_model.end() ? 0 : used_it->second;
        if (used + c.blocks > limit->second) {
          over = over_quota(quota, "blocks_per_model." + name, std::to_string(c.blocks), std::to_string(used),
                            std::to_string(limit->second));
        }
      }
    } else if (!quota.blocks_per_model.empty() && c.blocks > 0 && !quota.gpus) {
      // A job free to land on several models could otherwise slip past every per-model limit.
      over = Error::of(ErrorCode::kFailedPrecondition, "spec.gpu", to_string(job.spec.gpu),
                       fmt::format("quota \"{}\" limits blocks per model; name one model (e.g. h100-25)", quota.meta.name));
    }
    if (!over && quota.gpu_hours && c.blocks > 0) {
      double used = gpu_hours(quota.project, quota.user, quota.gpu_hours_window, now);
      if (used >= *quota.gpu_hours) {
        over = over_quota(quota, "gpu_hours", gpus_text(c.blocks) + " GPUs", fmt::format("{:.2f}", used),
                          fmt::format("{:g} per {}", *quota.gpu_hours, format_duration(quota.gpu_hours_window)));
      }
    }
    if (!over) continue;
    if (!quota.borrowing) return *over;
    admitted.borrowing = true;
    admitted.note = over->message + "; admitted as pre-emptible (borrowing idle capacity)";
  }
  // Count it now; the cache's copy of the stored job replaces this when it arrives.
  auto it = by_job_.find(id);
  if (it != by_job_.end()) add(it->second, -1);
  add(c, +1);
  jobs_of_project_[c.project].insert(id);
  by_job_[id] = std::move(c);
  return admitted;
}

Status check_admissible(const model::Job& job, const ObjectCache& cache, const sched::PolicyConfig& policy, Time now,
                        const model::Workspace* workspace) {
  const model::JobSpec& spec = job.spec;
  if (!cache.projects.get(spec.project).object) {
    return Error::not_found("spec.project", spec.project, "no such project; an admin creates it with `cnlab admin project create`");
  }
  if (spec.command.empty()) {
    return Error::invalid_argument("spec.command", "[]", "a job needs a command to run");
  }
  if (spec.workspace) {
    const std::string& digest = spec.workspace->digest;
    if (!workspace || workspace->digest != digest) {
      return Error::of(ErrorCode::kFailedPrecondition, "spec.workspace.digest", digest,
                       fmt::format("no workspace with this digest was uploaded to project \"{}\"; upload it first "
                                   "(PUT /v1/workspaces/{}?project={})",
                                   spec.project, digest, spec.project));
    }
    if (workspace->size_bytes != spec.workspace->size_bytes) {
      return Error::of(ErrorCode::kFailedPrecondition, "spec.workspace.digest", digest,
                       fmt::format("the workspace uploaded with this digest has {} bytes, the job says {} "
                                   "(spec.workspace.size_bytes)",
                                   workspace->size_bytes, spec.workspace->size_bytes));
    }
  }
  if (policy.tier_index(spec.priority_class) < 0) {
    std::string names;
    for (const auto& tier : policy.tiers) names += (names.empty() ? "" : ", ") + tier.name;
    return Error::invalid_argument("spec.priority_class", spec.priority_class, "known classes: " + names);
  }
  if (spec.deadline) {
    if (*spec.deadline <= now) {
      return Error::of(ErrorCode::kFailedPrecondition, "spec.deadline", format_rfc3339(*spec.deadline),
                       "the deadline has passed (now " + format_rfc3339(now) + ")");
    }
    if (spec.estimated_duration && now + *spec.estimated_duration > *spec.deadline) {
      return Error::of(ErrorCode::kFailedPrecondition, "spec.deadline", format_rfc3339(*spec.deadline),
                       fmt::format("cannot be met: the job runs {} and only {} are left", format_duration(*spec.estimated_duration),
                                   format_duration(*spec.deadline - now)));
    }
  }

  // Can it ever fit? Count, over nodes that are not Lost, what the request could use.
  const model::SliceRequest& gpu = spec.gpu;
  int64_t max_cpu = 0, max_memory = 0;
  int64_t gpus_total = 0, gpus_max_on_node = 0;
  bool model_present = false, vram_fits = gpu.kind != model::SliceKind::kBlocks || !gpu.vram_mib;
  cache.nodes.for_each([&](const std::string&, const model::Node& node, int64_t) {
    if (node.phase == model::NodePhase::kLost) return;
    max_cpu = std::max(max_cpu, node.cpu_milli);
    max_memory = std::max(max_memory, node.memory_mib);
    int64_t here = 0;
    for (const auto& g : node.gpus) {
      if (!model::mask_allows(gpu.models, g.model)) continue;
      if (gpu.kind == model::SliceKind::kMig && !model::gpu_model(g.model).mig_capable()) continue;
      model_present = true;
      if (gpu.vram_mib && *gpu.vram_mib <= g.memory_mib) vram_fits = true;
      ++here;
    }
    gpus_total += here;
    gpus_max_on_node = std::max(gpus_max_on_node, here);
  });
  std::string request = to_string(gpu);
  if (spec.cpu_milli > max_cpu) {
    return Error::of(ErrorCode::kFailedPrecondition, "spec.cpu_milli", std::to_string(spec.cpu_milli),
                     fmt::format("can never fit: the largest node has {} millicores", max_cpu));
  }
  if (spec.memory_mib > max_memory) {
    return Error::of(ErrorCode::kFailedPrecondition, "spec.memory_mib", std::to_string(spec.memory_mib),
                     fmt::format("can never fit: the largest node has {} MiB", max_memory));
  }
  if (gpu.kind == model::SliceKind::kNone) return Status::ok();
  if (!model_present) {
    return Error::of(ErrorCode::kFailedPrecondition, "spec.gpu", request,
                     gpu.kind == model::SliceKind::kMig ? "can never fit: no node has a MIG-capable GPU of this model"
                                                        : "can never fit: no node has a GPU of this model");
  }
  if (!vram_fits) {
    return Error::of(ErrorCode::kFailedPrecondition, "spec.vram", vram_text(gpu),
                     "can never fit: no GPU of this model has that much memory");
  }
  int64_t reachable = policy.gangs_span_nodes ? gpus_total : gpus_max_on_node;
  if (gpu.kind == model::SliceKind::kWhole && gpu.gpu_count > reachable) {
    return Error::of(ErrorCode::kFailedPrecondition, "spec.gpu", request,
                     fmt::format("can never fit: {} GPUs of this model {}", reachable,
                                 policy.gangs_span_nodes ? "exist in the cluster" : "is the most on one node"));
  }
  return Status::ok();
}

}  // namespace cnlab::server
