#include "server/migrations.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <tuple>
#include <type_traits>

#include "model/gpu_catalog.h"
#include "server/job_writes.h"

namespace cnlab::server {

void bind_to_migration_target(model::Job& job, const std::string& source, int64_t frozen_at_ms, Time now) {
  model::Migration& move = *job.status.migration;
  move.from = source;
  move.frozen_at = now;
  move.frozen_at_ms = frozen_at_ms;
  if (job.status.placement.size() == 1) move.from_gpus = job.status.placement.front().gpus;
  job.status.phase = model::JobPhase::kScheduled;
  job.status.placement = {model::NodeBinding{move.to, move.gpus}};
  job.status.events.push_back({model::JobEventType::kScheduled, now,
                               fmt::format("migrating from {} to {}: restored there from the dump", source, move.to)});
}

void roll_back_migration(model::Job& job, Time now, const std::string& why) {
  const model::Migration move = *job.status.migration;
  job.status.migration.reset();
  if (!move.from.empty()) {
    job.status.phase = model::JobPhase::kRunning;
    job.status.placement = {model::NodeBinding{move.from, move.from_gpus}};
    if (!job.status.started_at) job.status.started_at = now;
    job.status.waiting_reason.clear();
  }
  job.status.events.push_back({model::JobEventType::kMigrationFailed, now,
                               why + (move.from.empty() ? "; it runs on where it was"
                                                        : "; it carries on on " + move.from)});
}

std::string migration_refusal(const model::Job& job, const model::Node* source) {
  if (job.status.phase != model::JobPhase::kRunning) {
    return "the job is " + std::string(to_string(job.status.phase)) + "; only a Running job migrates";
  }
  if (!job.spec.checkpointable) return "the job is not checkpointable (spec.checkpointable)";
  if (job.status.cancel_requested) return "the job is being cancelled";
  if (job.status.migration) return "a migration of the job is already under way";
  if (job.status.placement.size() != 1) return "a gang job (several nodes) does not migrate";
  const auto& gpus = job.status.placement.front().gpus;
  if (gpus.empty()) return "";
  if (source && !source->gpu_checkpoint) {
    return "the job holds GPUs, and node " + source->meta.name +
           " does not checkpoint GPU state (its agent has no NVIDIA cuda-checkpoint); pre-empt it instead (it "
           "resumes from its checkpoint)";
  }
  return "";
}

std::map<std::string, NodeRoom> free_room(const ObjectCache& cache) {
  std::map<std::string, NodeRoom> room;
  cache.nodes.for_each([&](const std::string& name, const model::Node& node, int64_t) {
    NodeRoom& free = room[name];
    free = {node.cpu_milli, node.memory_mib, {}, {}};
    for (const auto& gpu : node.gpus) free.gpus.push_back({model::kBlocksPerGpu, gpu.memory_mib});
  });
  auto take_gpus = [&](const std::string& node, const std::vector<model::GpuBinding>& gpus) {
    auto it = room.find(node);
    if (it == room.end()) return;
    for (const auto& g : gpus) {
      if (g.index < 0 || g.index >= static_cast<int>(it->second.gpus.size())) continue;
      if (g.mig_start >= 0) it->second.mig_taken.insert({g.index, g.mig_start});
      it->second.gpus[static_cast<size_t>(g.index)].blocks -= g.blocks;
      it->second.gpus[static_cast<size_t>(g.index)].vram_mib -= g.vram_mib;
    }
  };
  auto take = [&](const std::string& node, const model::HostShare& share) {
    auto it = room.find(node);
    if (it == room.end()) return;
    it->second.cpu_milli -= share.cpu_milli;
    it->second.memory_mib -= share.memory_mib;
  };
  cache.for_each_job_in(cache.jobs_holding_gpus, [&](const std::string&, const model::Job& job) {
    const auto& placement = job.status.placement;
    if (placement.empty()) return;
    for (auto binding = placement.begin(); binding != placement.end(); ++binding) {
      // host_share counts every binding on the node: taken at the node's first one only.
      const bool first = std::none_of(placement.begin(), binding, [&](const auto& b) { return b.node == binding->node; });
      if (first) take(binding->node, model::host_share(job.spec, placement, binding->node));
      take_gpus(binding->node, binding->gpus);
    }
    if (job.status.migration && placement.size() == 1 && job.status.migration->to != placement.front().node) {
      take(job.status.migration->to, {job.spec.cpu_milli, model::memory_to_move_mib(job)});
      take_gpus(job.status.migration->to, job.status.migration->gpus);
    }
  });
  return room;
}

namespace {

// The MIG instance a move of a job holding instance `held` (on `source`) takes on `node`: a free one
// of the same profile, else a new one where the profile fits beside the layout (and the instances
// this move adds). Marks what it chose in `chosen`.
Result<model::GpuBinding> target_mig_instance(const model::GpuBinding& held, const model::Gpu& from,
                                              const model::Node& node, const NodeRoom& room,
                                              std::set<std::pair<int, int>>& chosen, TargetGpus& out) {
  int profile = -1;
  for (const auto& instance : from.mig_instances) {
    if (instance.start == held.mig_start) profile = instance.profile;
  }
  const auto& catalog = model::gpu_model(from.model);
  if (profile < 0 || profile >= static_cast<int>(catalog.mig_profiles.size())) {
    return Error::failed_precondition(fmt::format("GPU {} of its node has no MIG instance at slot {} (the job's binding)",
                                                  held.index, held.mig_start));
  }
  auto usable = [&](const model::Gpu& gpu) { return gpu.model == from.model && gpu.mig_enabled && gpu.healthy; };
  for (const auto& gpu : node.gpus) {
    if (!usable(gpu)) continue;
    for (const auto& instance : gpu.mig_instances) {
      const std::pair<int, int> key{gpu.index, instance.start};
      if (instance.profile != profile || room.mig_taken.count(key) || chosen.count(key)) continue;
      chosen.insert(key);
      return model::GpuBinding{gpu.index, held.blocks, held.vram_mib, instance.start};
    }
  }
  for (const auto& gpu : node.gpus) {
    if (!usable(gpu)) continue;
    std::vector<model::MigInstance> instances = gpu.mig_instances;
    for (const auto& [index, added] : out.new_instances) {
      if (index == gpu.index) instances.push_back(added);
    }
    auto layout = model::MigLayout::create(gpu.model, instances);
    if (!layout) continue;
    const int start = layout->first_fit(profile);
    if (start < 0) continue;
    chosen.insert({gpu.index, start});
    out.new_instances.push_back({gpu.index, model::MigInstance{profile, start}});
    return model::GpuBinding{gpu.index, held.blocks, held.vram_mib, start};
  }
  return Error::failed_precondition(fmt::format("node {} has no {} GPU in MIG mode with a free {} instance or room for one",
                                                node.meta.name, catalog.name, catalog.mig_profiles[profile].name));
}

}  // namespace

Result<TargetGpus> migration_target_gpus(const model::Job& job, const model::Node& source, const model::Node& node,
                                         const NodeRoom& room) {
  TargetGpus out;
  if (job.status.placement.size() != 1) return out;
  std::vector<bool> taken(node.gpus.size(), false);
  std::set<std::pair<int, int>> chosen_instances;
  for (const auto& held : job.status.placement.front().gpus) {
    if (held.index < 0 || held.index >= static_cast<int>(source.gpus.size())) {
      return Error::failed_precondition(fmt::format("node {} has no GPU {} (the job's binding)", source.meta.name, held.index));
    }
    const model::Gpu& from = source.gpus[static_cast<size_t>(held.index)];
    if (held.mig_start >= 0) {
      auto instance = target_mig_instance(held, from, node, room, chosen_instances, out);
      if (!instance) return instance.error();
      out.gpus.push_back(*instance);
      continue;
    }
    const model::ModelId gpu_model = from.model;
    int best = -1;
    for (size_t i = 0; i < node.gpus.size() && i < room.gpus.size(); ++i) {
      const model::Gpu& gpu = node.gpus[i];
      const GpuRoom& free = room.gpus[i];
      if (taken[i] || gpu.model != gpu_model || gpu.mig_enabled || !gpu.healthy) continue;
      if (free.blocks < held.blocks || free.vram_mib < held.vram_mib) continue;
      if (best < 0 || free.blocks < room.gpus[static_cast<size_t>(best)].blocks) best = static_cast<int>(i);
    }
    if (best < 0) {
      return Error::failed_precondition(fmt::format(
          "node {} has no {} GPU outside MIG with {} blocks and {} MiB of VRAM free for it", node.meta.name,
          model::gpu_model(gpu_model).name, held.blocks, held.vram_mib));
    }
    taken[static_cast<size_t>(best)] = true;
    out.gpus.push_back({best, held.blocks, held.vram_mib, -1});
  }
  return out;
}

std::string gpu_state_target_refusal(const model::Node* source, const model::Node& target) {
  const std::string& name = target.meta.name;
  if (!target.gpu_checkpoint) return "node " + name + " does not restore GPU state (its agent has no NVIDIA cuda-checkpoint)";
  // A job on simulated GPUs holds no device state and one on real GPUs does: neither resumes on the other.
  if (source && target.simulated != source->simulated) {
    return fmt::format("node {}'s GPUs are {} and node {}'s are {}: a job holding GPUs moves only between real GPUs or "
                       "between simulated ones",
                       name, target.simulated ? "simulated" : "real", source->meta.name,
                       source->simulated ? "simulated" : "real");
  }
  return "";
}

std::string migration_target_refusal(const model::Job& job, const model::Node& source, const model::Node& node,
                                     const NodeRoom& room) {
  const std::string& name = node.meta.name;
  if (!node.schedulable()) {
    return fmt::format("node {} is {}{}: it takes no new work", name, to_string(node.phase),
                       node.unschedulable ? " (cordoned)" : "");
  }
  if (node.peer_address.empty()) return "node " + name + " takes no migrations (its agent reported no peer endpoint)";
  // The target must hold what the move copies: a job that asked for no memory may hold gigabytes.
  const int64_t memory = model::memory_to_move_mib(job);
  if (job.spec.cpu_milli > room.cpu_milli || memory > room.memory_mib) {
    return fmt::format("node {} has {} milli-CPU and {} MiB of memory free; the job needs {} and {}{}", name,
                       std::max<int64_t>(room.cpu_milli, 0), std::max<int64_t>(room.memory_mib, 0),
                       job.spec.cpu_milli, memory,
                       memory > job.spec.memory_mib ? " (the memory its processes hold, which the move copies)" : "");
  }
  const bool holds_gpus = job.status.placement.size() == 1 && !job.status.placement.front().gpus.empty();
  if (std::string why = holds_gpus ? gpu_state_target_refusal(&source, node) : ""; !why.empty()) return why;
  if (auto gpus = migration_target_gpus(job, source, node, room); !gpus) return gpus.error().message;
  return "";
}

namespace {

// The node other than `source` that can take `job` and ranks lowest by `rank` (a tuple, compared
// as such; ties go to the first node in name order), with the GPUs it takes there.
template <typename RankOf>
Result<MigrationTarget> best_migration_target(const ObjectCache& cache, const model::Job& job, const model::Node& source,
                                              const std::map<std::string, NodeRoom>& room, RankOf rank_of) {
  std::optional<MigrationTarget> best;
  std::optional<std::invoke_result_t<RankOf, const model::Node&, const NodeRoom&, const TargetGpus&>> best_rank;
  cache.nodes.for_each([&](const std::string& name, const model::Node& node, int64_t) {
    const NodeRoom& free = room.at(name);
    if (name == source.meta.name || !migration_target_refusal(job, source, node, free).empty()) return;
    TargetGpus gpus = *migration_target_gpus(job, source, node, free);
    auto rank = rank_of(node, free, gpus);
    if (!best_rank || rank < *best_rank) {
      best_rank = rank;
      best = MigrationTarget{name, std::move(gpus)};
    }
  });
  if (!best) {
    return Error::failed_precondition("no other node can take job " + job.meta.name +
                                      " (each is cordoned, not Ready, takes no migrations or lacks the CPU, "
                                      "memory or GPUs it needs): nowhere to migrate it");
  }
  return *best;
}

}  // namespace

Result<MigrationTarget> roomiest_migration_target(const ObjectCache& cache, const model::Job& job,
                                                  const model::Node& source, const std::map<std::string, NodeRoom>& room) {
  return best_migration_target(cache, job, source, room,
                               [](const model::Node&, const NodeRoom& free, const TargetGpus&) { return -free.cpu_milli; });
}

Result<MigrationTarget> roomiest_migration_target_holding(const ObjectCache& cache, const model::Job& job,
                                                          const model::Node& source,
                                                          const std::map<std::string, NodeRoom>& room,
                                                          const std::vector<int64_t>& holding_mib) {
  const auto& placement = job.status.placement;
  if (!holding_mib.empty() && placement.size() == 1 && placement.front().gpus.size() == holding_mib.size()) {
    // The job sized by what it holds, for the choice only: the binding keeps its quotas.
    const auto& quotas = placement.front().gpus;
    model::Job sized = job;
    auto& gpus = sized.status.placement.front().gpus;
    for (size_t i = 0; i < gpus.size(); ++i) gpus[i].vram_mib = std::max(gpus[i].vram_mib, holding_mib[i]);
    if (auto target = roomiest_migration_target(cache, sized, source, room)) {
      for (size_t i = 0; i < target->gpus.gpus.size(); ++i) target->gpus.gpus[i].vram_mib = quotas[i].vram_mib;
      return target;
    }
  }
  return roomiest_migration_target(cache, job, source, room);
}

Result<MigrationTarget> packed_migration_target(const ObjectCache& cache, const model::Job& job,
                                                const model::Node& source, const std::map<std::string, NodeRoom>& room) {
  return best_migration_target(
      cache, job, source, room, [&](const model::Node& node, const NodeRoom& free, const TargetGpus& gpus) {
        bool idle = free.cpu_milli == node.cpu_milli && free.memory_mib == node.memory_mib && free.mig_taken.empty();
        for (const GpuRoom& gpu : free.gpus) idle = idle && gpu.blocks == model::kBlocksPerGpu;
        int blocks_left = 0;  // on the GPUs it takes outside MIG (MIG instances are whole already)
        for (const auto& g : gpus.gpus) {
          if (g.mig_start < 0) blocks_left += free.gpus[static_cast<size_t>(g.index)].blocks - g.blocks;
        }
        const double cpu_left =
            node.cpu_milli > 0 ? static_cast<double>(free.cpu_milli - job.spec.cpu_milli) / node.cpu_milli : 0.0;
        return std::tuple(idle, blocks_left, cpu_left);
      });
}

std::map<std::string, int64_t> migrations_handed_over(const ObjectCache& c) {
  std::map<std::string, int64_t> held;
  c.for_each_job_in(c.jobs_migrating, [&](const std::string&, const model::Job& job) {
    if (job.status.migration && !job.status.migration->from.empty()) ++held[job.status.migration->from];
  });
  return held;
}

void ask_to_migrate(model::Job& job, const MigrationTarget& target, Time now, const std::string& how) {
  const std::string from = job.status.placement.empty() ? "" : job.status.placement.front().node;
  job.status.migration = model::Migration{target.node, now, "", std::nullopt};
  job.status.migration->gpus = target.gpus.gpus;
  job.status.events.push_back({model::JobEventType::kMigrationRequested, now,
                               fmt::format("migration from {} to {} {}", from, target.node, how)});
}

Status add_mig_instances(store::Store& store, ObjectCache& cache, const std::string& name,
                         const std::vector<std::pair<int, model::MigInstance>>& added, const std::string& audit) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    auto record = store.get(kind::kNodes, name);
    if (!record) return record.error();
    auto node = model::node_from_json(Json::parse(record->value, nullptr, false));
    if (!node) return node.error();
    for (const auto& [index, instance] : added) {
      if (index < 0 || index >= static_cast<int>(node->gpus.size())) {
        return Error::failed_precondition(fmt::format("node {} has no GPU {}", name, index));
      }
      model::Gpu& gpu = node->gpus[static_cast<size_t>(index)];
      gpu.mig_instances.push_back(instance);
      if (auto layout = model::MigLayout::create(gpu.model, gpu.mig_instances); !layout) return layout.error();
    }
    node->meta.revision = 0;
    auto committed = store.txn({store::Op::update(kind::kNodes, name, to_json(*node).dump(), record->mod_revision)}, audit);
    if (committed) {
      for (const auto& r : committed->records) cache.apply(r);
      return Status::ok();
    }
    if (committed.error().code != ErrorCode::kConflict) return committed.error();
  }
  return Error::of(ErrorCode::kConflict, "node", name, "its record kept changing; ask again");
}


MigrationWatch::MigrationWatch(store::Store& store, ObjectCache& cache, Duration timeout,
                               std::map<std::string, Duration> checkpoint_every, std::function<Time()> clock,
                               std::function<void()> wake_scheduler, MetricFamily& migrations)
    : store_(store),
      cache_(cache),
      timeout_(timeout),
      checkpoint_every_(std::move(checkpoint_every)),
      clock_(std::move(clock)),
      wake_scheduler_(std::move(wake_scheduler)),
      migrations_(migrations) {}

MigrationWatch::~MigrationWatch() { stop(); }

void MigrationWatch::start(std::chrono::milliseconds period) { periodic_.start(period, [this] { check_once(); }); }

void MigrationWatch::stop() { periodic_.stop(); }

void MigrationWatch::check_once() {
  const Time now = clock_();
  std::vector<std::string> migrating, due;
  cache_.read([&](const ObjectCache& c) {
    for (const auto& [id, job] : c.jobs_migrating) migrating.push_back(id);
    if (checkpoint_every_.empty()) return 0;
    c.for_each_job_in(c.jobs_holding_gpus, [&](const std::string& id, const model::Job& job) {
      if (job.status.migration) return;
      if (job.status.phase != model::JobPhase::kRunning || !job.spec.checkpointable || !job.status.started_at) return;
      auto every = checkpoint_every_.find(job.spec.priority_class);
      if (every == checkpoint_every_.end()) return;
      Time last = std::max({*job.status.started_at, job.status.last_checkpoint_at.value_or(Time{}),
                            job.status.checkpoint_requested_at.value_or(Time{})});
      if (now - last >= every->second) due.push_back(id);
    });
    return 0;
  });
  bool rebound = false;
  for (const auto& id : migrating) {
    std::string why;
    Json audit = {{"time", format_rfc3339(now)}, {"actor", "migration-watch"}, {"action", "jobs.migrate"},
                  {"target", id}, {"outcome", "rolled_back"}, {"detail", Json::object()}};
    auto updated = update_job(store_, &cache_, id, [&](model::Job& job) -> Result<bool> {
      if (!job.status.migration) return false;
      const model::Migration& move = *job.status.migration;
      if (move.from.empty()) {
        if (job.status.phase != model::JobPhase::kRunning) {
          why = "the job stopped running before its source dumped it";
        } else if (now - std::max(move.requested_at, move.progress_at.value_or(Time{})) > timeout_) {
          why = move.progress_at ? fmt::format("its node said nothing of its dump for {} (last: {})",
                                               format_duration(timeout_), move.progress)
                                 : fmt::format("its node did not hand its dump over within {}", format_duration(timeout_));
        }
      } else if (job.status.phase == model::JobPhase::kPending) {
        why = "the target " + move.to + " was lost before the job ran there";
      } else if (job.status.phase == model::JobPhase::kScheduled && move.frozen_at &&
                 now - std::max(*move.frozen_at, move.progress_at.value_or(Time{})) > timeout_) {
        // From the hand-over (frozen_at is set then) or the target's latest word that it is restoring.
        why = fmt::format("the target {} did not restore it within {}", move.to, format_duration(timeout_));
      }
      if (why.empty()) return false;
      if (is_terminal(job.status.phase)) {
        job.status.migration.reset();
        return true;
      }
      roll_back_migration(job, now, "migration given up: " + why);
      return true;
    }, audit.dump());
    if (!updated) {
      spdlog::error("migration check failed job=\"{}\" error=\"{}\"", id, updated.error().to_string());
    } else if (*updated) {
      spdlog::warn("migration given up job=\"{}\" reason=\"{}\"", id, why);
      migrations_.inc({{"outcome", "given_up"}});
      rebound = true;
    }
  }
  for (const auto& id : due) {
    auto updated = update_job(store_, &cache_, id, [&](model::Job& job) -> Result<bool> {
      if (job.status.phase != model::JobPhase::kRunning || job.status.migration) return false;
      job.status.checkpoint_requested_at = now;
      return true;
    }, std::nullopt);
    if (!updated) spdlog::error("periodic checkpoint not requested job=\"{}\" error=\"{}\"", id, updated.error().to_string());
  }
  if (rebound && wake_scheduler_) wake_scheduler_();
}

}  // namespace cnlab::server
