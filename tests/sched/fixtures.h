// Builders for scheduler tests: clusters, jobs and an independent check of a snapshot's capacity.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "sched/scheduler.h"

namespace cnlab::sched::testing {

inline Time t0() { return *parse_rfc3339("2026-11-30T10:00:00Z", "t0"); }

inline model::Node gpu_node(const std::string& name, std::string_view model_name = "h100", int gpus = 8,
                            int64_t cpu_milli = 128000, int64_t memory_mib = 1024 * 1024) {
  model::Node node;
  node.meta.name = name;
  node.cpu_milli = cpu_milli;
  node.memory_mib = memory_mib;
  auto id = *model::find_model(model_name);
  for (int i = 0; i < gpus; ++i) {
    node.gpus.push_back({i, name + "-gpu" + std::to_string(i), id, model::gpu_model(id).memory_mib, true, false, {}});
  }
  node.idle_since = t0() - kDay;
  // Its agent takes live migrations and restores GPU state: every move the scheduler plans may land here.
  node.peer_address = name + ":7443";
  node.gpu_checkpoint = true;
  return node;
}

struct JobOptions {
  std::string project = "vision";
  std::string user = "alice";
  std::string priority_class = "dev";
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  Duration submitted_ago{60};
  std::optional<Duration> estimate;
  std::optional<Time> deadline;
  bool checkpointable = false;
  std::string vram;
};

inline model::Job pending_job(const std::string& name, std::string_view gpu, JobOptions o = {}) {
  model::Job job;
  job.meta.name = name;
  job.spec.project = o.project;
  job.spec.user = o.user;
  job.spec.priority_class = o.priority_class;
  auto slice = model::parse_slice(gpu, o.vram);
  EXPECT_TRUE(slice) << (slice ? "" : slice.error().to_string());
  if (slice) job.spec.gpu = *slice;
  job.spec.cpu_milli = o.cpu_milli;
  job.spec.memory_mib = o.memory_mib;
  job.spec.estimated_duration = o.estimate;
  job.spec.deadline = o.deadline;
  job.spec.checkpointable = o.checkpointable;
  job.status.submitted_at = t0() - o.submitted_ago;
  return job;
}

// A running job bound to `gpus` (each {index, blocks, mig_start}) of `node`.
inline model::Job running_job(const std::string& name, std::string_view gpu, const std::string& node,
                              std::vector<model::GpuBinding> gpus, Duration ran_for, JobOptions o = {}) {
  model::Job job = pending_job(name, gpu, o);
  job.status.phase = model::JobPhase::kRunning;
  job.status.started_at = t0() - ran_for;
  job.status.submitted_at = t0() - ran_for - Duration{60};
  job.status.placement = {{node, std::move(gpus)}};
  return job;
}

inline model::GpuBinding whole_gpu(int index) { return {index, 100, 80 * 1024, -1}; }
inline model::GpuBinding blocks_on(int index, int blocks) { return {index, blocks, 80 * 1024 * blocks / 100, -1}; }

inline Snapshot snapshot_of(std::vector<model::Node> nodes, std::vector<model::Job> jobs) {
  Snapshot s;
  s.now = t0();
  s.nodes = std::move(nodes);
  s.jobs = std::move(jobs);
  return s;
}

inline const Placement* placement_of(const CycleResult& r, JobIndex job) {
  for (const auto& p : r.placements) {
    if (p.job == job) return &p;
  }
  return nullptr;
}

inline bool placed(const CycleResult& r, JobIndex job) { return placement_of(r, job) != nullptr; }

// Checks, independently of the scheduler, that the running jobs of `s` fit the hardware: blocks,
// VRAM and CPU/memory never over-committed, MIG grants inside valid instances, whole GPUs and MIG
// instances exclusive, gangs complete, model constraints held. Returns the first violation.
inline std::string capacity_violation(const Snapshot& s) {
  std::map<std::string, const model::Node*> nodes;
  for (const auto& n : s.nodes) nodes[n.meta.name] = &n;
  struct Use {
    int blocks = 0;
    int64_t vram = 0;
    int jobs = 0;
    bool exclusive = false;
  };
  std::map<std::tuple<std::string, int, int>, Use> uses;
  std::map<std::string, std::pair<int64_t, int64_t>> host;
  for (const auto& job : s.jobs) {
    if (job.status.phase != model::JobPhase::kRunning) continue;
    int gpus = 0;
    for (const auto& b : job.status.placement) {
      auto it = nodes.find(b.node);
      if (it == nodes.end()) return job.meta.name + " on unknown node " + b.node;
      const model::Node& node = *it->second;
      for (const auto& g : b.gpus) {
        ++gpus;
        if (g.index < 0 || g.index >= static_cast<int>(node.gpus.size())) return job.meta.name + " on a missing GPU";
        const model::Gpu& gpu = node.gpus[g.index];
        if (!model::mask_allows(job.spec.gpu.models, gpu.model)) return job.meta.name + " on a model it excluded";
        if (g.mig_start >= 0) {
          bool found = false;
          for (const auto& inst : gpu.mig_instances) found = found || (gpu.mig_enabled && inst.start == g.mig_start);
          if (!found) return job.meta.name + " in a MIG instance that does not exist";
        } else if (gpu.mig_enabled) {
          return job.meta.name + " on a whole GPU that is in MIG mode";
        }
        Use& u = uses[{b.node, g.index, g.mig_start}];
        u.blocks += g.blocks;
        u.vram += g.vram_mib;
        ++u.jobs;
        u.exclusive = u.exclusive || job.spec.gpu.kind != model::SliceKind::kBlocks;
      }
      int64_t share = job.spec.gpu.kind == model::SliceKind::kWhole ? static_cast<int64_t>(b.gpus.size()) : 1;
      int64_t of = job.spec.gpu.kind == model::SliceKind::kWhole ? job.spec.gpu.gpu_count : 1;
      host[b.node].first += job.spec.cpu_milli * share / of;
      host[b.node].second += job.spec.memory_mib * share / of;
    }
    int want = job.spec.gpu.kind == model::SliceKind::kWhole ? job.spec.gpu.gpu_count
               : job.spec.gpu.kind == model::SliceKind::kNone  ? 0
                                                               : 1;
    if (gpus != want) return job.meta.name + " holds " + std::to_string(gpus) + " GPUs of " + std::to_string(want);
  }
  for (const auto& [key, u] : uses) {
    const auto& [node_name, index, mig_start] = key;
    const model::Gpu& gpu = nodes[node_name]->gpus[index];
    int capacity = model::kBlocksPerGpu;
    int64_t memory = gpu.memory_mib;
    if (mig_start >= 0) {
      for (const auto& inst : gpu.mig_instances) {
        if (inst.start != mig_start) continue;
        capacity = model::gpu_model(gpu.model).mig_profiles[inst.profile].blocks();
        memory = model::gpu_model(gpu.model).mig_profiles[inst.profile].memory_mib;
      }
    }
    std::string where = node_name + " GPU " + std::to_string(index) + " slot " + std::to_string(mig_start);
    if (u.blocks > capacity) return where + ": " + std::to_string(u.blocks) + " blocks handed out";
    if (memory > 0 && u.vram > memory) return where + ": VRAM over-committed";
    if (u.exclusive && u.jobs > 1) return where + ": an exclusive grant is shared";
  }
  for (const auto& n : s.nodes) {
    if (!model::validate(n)) return n.meta.name + ": invalid MIG layout";
  }
  for (const auto& [name, used] : host) {
    if (used.first > nodes[name]->cpu_milli || used.second > nodes[name]->memory_mib) {
      return name + ": host CPU or memory over-committed";
    }
  }
  return "";
}

}  // namespace cnlab::sched::testing
