#include "sim/policies/fifo_replay_policy.h"

#include <algorithm>
#include <array>
#include <set>
#include <tuple>

namespace cnlab::sim {
namespace {

// Capacity only shrinks during a cycle, so a request that found no room finds none later in it.
using ShapeKey = std::tuple<model::SliceKind, model::ModelMask, int, int, int64_t, int64_t>;

ShapeKey key_of(const model::JobSpec& spec) {
  return {spec.gpu.kind, spec.gpu.models, spec.gpu.gpu_count, spec.gpu.mig_profile, spec.cpu_milli, spec.memory_mib};
}

int gpus_wanted(const model::SliceRequest& gpu) {
  switch (gpu.kind) {
    case model::SliceKind::kNone: return 0;
    case model::SliceKind::kWhole: return gpu.gpu_count;
    case model::SliceKind::kBlocks:
    case model::SliceKind::kMig: return 1;
  }
  return 0;
}

}  // namespace

void FifoReplayPolicy::index_nodes(const sched::Snapshot& snapshot) {
  node_index_.clear();
  rooms_.assign(snapshot.nodes.size(), {});
  max_per_node_.assign(model::kMaxModels, 0);
  uint32_t gpus = 0;
  for (uint32_t n = 0; n < snapshot.nodes.size(); ++n) {
    const model::Node& node = snapshot.nodes[n];
    node_index_.emplace(node.meta.name, n);
    rooms_[n].gpu_begin = gpus;
    gpus += static_cast<uint32_t>(node.gpus.size());
    rooms_[n].gpu_end = gpus;
    std::array<int, model::kMaxModels> per_model{};
    for (const model::Gpu& gpu : node.gpus) ++per_model[gpu.model];
    for (int m = 0; m < model::kMaxModels; ++m) max_per_node_[m] = std::max(max_per_node_[m], per_model[m]);
  }
  free_.assign(gpus, 0);
}

void FifoReplayPolicy::load(const sched::Snapshot& snapshot) {
  if (rooms_.size() != snapshot.nodes.size()) index_nodes(snapshot);
  for (uint32_t n = 0; n < snapshot.nodes.size(); ++n) {
    const model::Node& node = snapshot.nodes[n];
    Room& room = rooms_[n];
    room.cpu = node.cpu_milli;
    room.mem = node.memory_mib;
    room.usable = node.schedulable();
    for (size_t g = 0; g < node.gpus.size(); ++g) free_[room.gpu_begin + g] = node.gpus[g].healthy ? 1 : 0;
  }
  for (const model::Job& job : snapshot.jobs) {
    if (job.status.phase != model::JobPhase::kRunning) continue;
    size_t total = 0;
    for (const auto& binding : job.status.placement) total += binding.gpus.size();
    for (const auto& binding : job.status.placement) {
      auto it = node_index_.find(binding.node);
      if (it == node_index_.end()) continue;  // the engine only binds to the snapshot's nodes
      Room& room = rooms_[it->second];
      // Host resources split over nodes in proportion to their GPUs, rounded up, as sched does.
      size_t share = total == 0 ? 1 : binding.gpus.size();
      size_t of = total == 0 ? job.status.placement.size() : total;
      room.cpu -= static_cast<int64_t>((static_cast<size_t>(job.spec.cpu_milli) * share + of - 1) / of);
      room.mem -= static_cast<int64_t>((static_cast<size_t>(job.spec.memory_mib) * share + of - 1) / of);
      for (const auto& g : binding.gpus) {
        if (g.index >= 0 && room.gpu_begin + static_cast<uint32_t>(g.index) < room.gpu_end) {
          free_[room.gpu_begin + static_cast<uint32_t>(g.index)] = 0;
        }
      }
    }
  }
}

bool FifoReplayPolicy::allows(const model::JobSpec& spec, model::ModelId model) const {
  if (spec.gpu.kind == model::SliceKind::kMig) return model == spec.gpu.mig_model();
  return model::mask_allows(spec.gpu.models, model);
}

sched::GpuGrant FifoReplayPolicy::take(const sched::Snapshot& snapshot, uint32_t node, int gpu) {
  free_[rooms_[node].gpu_begin + static_cast<uint32_t>(gpu)] = 0;
  return {gpu, model::kBlocksPerGpu, snapshot.nodes[node].gpus[static_cast<size_t>(gpu)].memory_mib, -1};
}

std::optional<std::vector<sched::NodeGrant>> FifoReplayPolicy::place(const model::JobSpec& spec,
                                                                     const sched::Snapshot& snapshot) {
  const int count = gpus_wanted(spec.gpu);
  for (uint32_t n = 0; n < rooms_.size(); ++n) {
    Room& room = rooms_[n];
    if (!room.usable || room.cpu < spec.cpu_milli || room.mem < spec.memory_mib) continue;
    const model::Node& node = snapshot.nodes[n];
    if (count == 0) {
      room.cpu -= spec.cpu_milli;
      room.mem -= spec.memory_mib;
      return std::vector<sched::NodeGrant>{{n, {}}};
    }
    // A gang takes GPUs of one model; the first model (by GPU index) with enough free ones.
    std::array<int, model::kMaxModels> free_of{};
    int model = -1;
    for (size_t g = 0; g < node.gpus.size() && model < 0; ++g) {
      model::ModelId m = node.gpus[g].model;
      if (free_[room.gpu_begin + g] && allows(spec, m) && ++free_of[m] == count) model = m;
    }
    if (model < 0) continue;
    sched::NodeGrant grant{n, {}};
    for (size_t g = 0; g < node.gpus.size() && static_cast<int>(grant.gpus.size()) < count; ++g) {
      if (free_[room.gpu_begin + g] && node.gpus[g].model == model) grant.gpus.push_back(take(snapshot, n, static_cast<int>(g)));
    }
    room.cpu -= spec.cpu_milli;
    room.mem -= spec.memory_mib;
    return std::vector<sched::NodeGrant>{std::move(grant)};
  }
  if (count > 1) return place_multi(spec, count, snapshot);
  return std::nullopt;
}

std::optional<std::vector<sched::NodeGrant>> FifoReplayPolicy::place_multi(const model::JobSpec& spec, int count,
                                                                           const sched::Snapshot& snapshot) {
  for (int m = 0; m < model::kMaxModels; ++m) {
    auto id = static_cast<model::ModelId>(m);
    if (max_per_node_[m] == 0 || max_per_node_[m] >= count || !allows(spec, id)) continue;
    struct Take {
      uint32_t node;
      int gpus;
      int64_t cpu, mem;
    };
    std::vector<Take> takes;
    int gathered = 0;
    for (uint32_t n = 0; n < rooms_.size() && gathered < count; ++n) {
      const Room& room = rooms_[n];
      if (!room.usable) continue;
      const model::Node& node = snapshot.nodes[n];
      int k = 0;
      for (size_t g = 0; g < node.gpus.size() && gathered + k < count; ++g) {
        k += free_[room.gpu_begin + g] && node.gpus[g].model == id ? 1 : 0;
      }
      if (k == 0) continue;
      int64_t cpu = (spec.cpu_milli * k + count - 1) / count;
      int64_t mem = (spec.memory_mib * k + count - 1) / count;
      if (room.cpu < cpu || room.mem < mem) continue;
      takes.push_back({n, k, cpu, mem});
      gathered += k;
    }
    if (gathered < count) continue;
    std::vector<sched::NodeGrant> grants;
    for (const Take& t : takes) {
      sched::NodeGrant grant{t.node, {}};
      const model::Node& node = snapshot.nodes[t.node];
      for (size_t g = 0; g < node.gpus.size() && static_cast<int>(grant.gpus.size()) < t.gpus; ++g) {
        if (free_[rooms_[t.node].gpu_begin + g] && node.gpus[g].model == id) {
          grant.gpus.push_back(take(snapshot, t.node, static_cast<int>(g)));
        }
      }
      rooms_[t.node].cpu -= t.cpu;
      rooms_[t.node].mem -= t.mem;
      grants.push_back(std::move(grant));
    }
    return grants;
  }
  return std::nullopt;
}

sched::CycleResult FifoReplayPolicy::cycle(const sched::Snapshot& snapshot) {
  sched::CycleResult result;
  load(snapshot);
  std::vector<sched::JobIndex> queue;
  for (sched::JobIndex j = 0; j < snapshot.jobs.size(); ++j) {
    auto phase = snapshot.jobs[j].status.phase;
    if (phase == model::JobPhase::kPending) queue.push_back(j);
    if (phase == model::JobPhase::kRunning) ++result.stats.running;
  }
  result.stats.pending = static_cast<uint32_t>(queue.size());
  std::stable_sort(queue.begin(), queue.end(), [&](sched::JobIndex a, sched::JobIndex b) {
    return snapshot.jobs[a].status.submitted_at < snapshot.jobs[b].status.submitted_at;
  });
  std::set<ShapeKey> failed;
  for (sched::JobIndex j : queue) {
    const model::JobSpec& spec = snapshot.jobs[j].spec;
    ShapeKey key = key_of(spec);
    if (!failed.contains(key)) {
      ++result.stats.placement_attempts;
      if (auto grants = place(spec, snapshot)) {
        result.placements.push_back({j, std::move(*grants), {}, {}});
        continue;
      }
      failed.insert(key);
    }
    if (result.reasons.empty()) result.reasons.push_back("fifo: no node has room for it now");
    result.waiting.push_back({j, 0});
  }
  return result;
}

}  // namespace cnlab::sim
