#include "sim/alloc_migration.h"

#include <algorithm>
#include <bit>

namespace cnlab::sim {
namespace {

// What would have to move off node `n` for `pod` to fit there, and what that costs.
struct Eviction {
  NodeIndex node = 0;
  std::vector<uint32_t> placements;
  int64_t gpu_milli = 0;  // GPU milli of the pods moved
  bool ok = false;
};

// Somewhere a moved pod could go: a node's largest GPU hole and its free host resources. Built once
// per pod that needs room, largest hole first, so a check stops at the first hole too small.
struct Hole {
  NodeIndex node;
  int free_milli;
  int32_t cpu_free, memory_free;
};

std::vector<Hole> holes_of(const AllocCluster& cluster) {
  std::vector<Hole> holes;
  for (NodeIndex n = 0; n < cluster.node_count(); ++n) {
    if (cluster.gpu_count(n) > 0 && cluster.max_gpu_free(n) > 0) {
      holes.push_back({n, cluster.max_gpu_free(n), cluster.cpu_free(n), cluster.memory_free(n)});
    }
  }
  std::sort(holes.begin(), holes.end(), [](const Hole& a, const Hole& b) { return a.free_milli > b.free_milli; });
  return holes;
}

// Whether sharing pod `q` could go to some node other than `from` as the cluster stands.
bool has_hole(const Pod& q, NodeIndex from, const AllocCluster& cluster, const std::vector<Hole>& holes) {
  for (const Hole& h : holes) {
    if (h.free_milli < q.gpu_milli) return false;
    if (h.node != from && h.cpu_free >= q.cpu_milli && h.memory_free >= q.memory_mib &&
        cluster.model_allowed(q.allowed_models, h.node)) {
      return true;
    }
  }
  return false;
}

// One GPU of a node: whether a whole-GPU pod holds it, and the sharing pods on it.
struct GpuHolders {
  bool movable = true;
  int free = 0;
  std::vector<uint32_t> sharing;
};

// The pods to move off GPU `g` (smallest first) until `need` milli are free there, each with a
// hole elsewhere; false when that cannot be done.
bool clear_gpu(const GpuHolders& g, int need, NodeIndex node, const AllocCluster& cluster, const Placements& placements,
               const std::vector<Hole>& holes, std::vector<uint32_t>& out) {
  if (!g.movable) return false;
  std::vector<uint32_t> pods = g.sharing;
  std::sort(pods.begin(), pods.end(),
            [&](uint32_t a, uint32_t b) { return placements.pod(a).gpu_milli < placements.pod(b).gpu_milli; });
  int room = g.free;
  for (uint32_t p : pods) {
    if (room >= need) break;
    if (!has_hole(placements.pod(p), node, cluster, holes)) return false;
    out.push_back(p);
    room += placements.pod(p).gpu_milli;
  }
  return room >= need;
}

Eviction plan_eviction(const Pod& pod, const AllocCluster& cluster, const Placements& placements, NodeIndex n,
                       const std::vector<Hole>& holes, const MigrationLimits& limits) {
  Eviction e;
  e.node = n;
  if (!cluster.model_allowed(pod.allowed_models, n) || cluster.gpu_count(n) < pod.num_gpu) return e;
  if (cluster.cpu_capacity(n) < pod.cpu_milli || cluster.memory_capacity(n) < pod.memory_mib) return e;
  const int gpus = cluster.gpu_count(n);
  std::vector<GpuHolders> holders(static_cast<size_t>(gpus));
  auto free = cluster.gpu_free(n);
  for (int g = 0; g < gpus; ++g) holders[static_cast<size_t>(g)].free = free[static_cast<size_t>(g)];
  std::vector<uint32_t> cpu_only;
  for (uint32_t p : placements.on_node(n)) {
    const Pod& q = placements.pod(p);
    if (q.kind() == PodKind::kCpuOnly) {
      cpu_only.push_back(p);
      continue;
    }
    uint32_t mask = placements.choice(p).gpus;
    for (int g = 0; g < gpus; ++g) {
      if (!((mask >> g) & 1)) continue;
      if (q.kind() == PodKind::kWholeGpu) holders[static_cast<size_t>(g)].movable = false;
      else holders[static_cast<size_t>(g)].sharing.push_back(p);
    }
  }
  // Per GPU, what clearing room for the pod there would move; the cheapest GPU(s) win.
  const int need = pod.kind() == PodKind::kWholeGpu ? kGpuMilli : pod.gpu_milli;
  struct Option {
    int gpu;
    std::vector<uint32_t> moves;
    int64_t milli = 0;
  };
  std::vector<Option> per_gpu;
  for (int g = 0; g < gpus; ++g) {
    Option o{g, {}, 0};
    if (!clear_gpu(holders[static_cast<size_t>(g)], need, n, cluster, placements, holes, o.moves)) continue;
    for (uint32_t p : o.moves) o.milli += placements.pod(p).gpu_request();
    per_gpu.push_back(std::move(o));
  }
  const int gpus_needed = pod.kind() == PodKind::kWholeGpu ? pod.num_gpu : 1;
  if (static_cast<int>(per_gpu.size()) < gpus_needed) return e;
  std::sort(per_gpu.begin(), per_gpu.end(), [](const Option& a, const Option& b) {
    return a.milli != b.milli ? a.milli < b.milli : a.moves.size() < b.moves.size();
  });
  for (int i = 0; i < gpus_needed; ++i) {
    for (uint32_t p : per_gpu[static_cast<size_t>(i)].moves) e.placements.push_back(p);
  }
  // Host CPU and memory: what the moved pods give back, then CPU-only pods, largest first.
  int64_t cpu = cluster.cpu_free(n), mem = cluster.memory_free(n);
  for (uint32_t p : e.placements) {
    cpu += placements.pod(p).cpu_milli;
    mem += placements.pod(p).memory_mib;
  }
  std::sort(cpu_only.begin(), cpu_only.end(),
            [&](uint32_t a, uint32_t b) { return placements.pod(a).cpu_milli > placements.pod(b).cpu_milli; });
  for (uint32_t p : cpu_only) {
    if (cpu >= pod.cpu_milli && mem >= pod.memory_mib) break;
    e.placements.push_back(p);
    cpu += placements.pod(p).cpu_milli;
    mem += placements.pod(p).memory_mib;
  }
  if (cpu < pod.cpu_milli || mem < pod.memory_mib) return e;
  if (e.placements.empty() || static_cast<int>(e.placements.size()) > limits.max_moves) return e;
  for (uint32_t p : e.placements) e.gpu_milli += placements.pod(p).gpu_request();
  // Only smaller pods move for a bigger one: moving as much as is gained is no gain.
  e.ok = e.gpu_milli < pod.gpu_request();
  return e;
}

// Takes placement `p` off its node (cluster, policy, bookkeeping).
void take_off(uint32_t p, AllocCluster& cluster, AllocPolicy& policy, Placements& placements) {
  cluster.release(placements.pod(p), placements.choice(p));
  policy.on_released(p);
  placements.remove(p);
}

// Places `pod` where the policy wants it among the nodes it fits; records it. False when it fits
// nowhere (nothing changed).
std::optional<uint32_t> place_anywhere(const Pod& pod, AllocCluster& cluster, AllocPolicy& policy, Placements& placements) {
  std::vector<NodeIndex> feasible;
  for (NodeIndex n = 0; n < cluster.node_count(); ++n) {
    if (cluster.fits(pod, n)) feasible.push_back(n);
  }
  if (feasible.empty()) return std::nullopt;
  auto choice = policy.place(pod, cluster, feasible);
  if (!choice || !cluster.apply(pod, *choice)) return std::nullopt;
  policy.on_placed(pod, *choice);
  return placements.add(pod, *choice);
}

}  // namespace

uint32_t Placements::add(const Pod& pod, const Choice& choice) {
  uint32_t id = static_cast<uint32_t>(all_.size());
  all_.push_back({pod, choice});
  on_node_[choice.node].push_back(id);
  return id;
}

void Placements::remove(uint32_t placement) {
  auto& list = on_node_[all_[placement].choice.node];
  list.erase(std::find(list.begin(), list.end(), placement));
}

void Placements::restore(uint32_t placement) { on_node_[all_[placement].choice.node].push_back(placement); }

std::optional<int> migrate_to_place(const Pod& pod, AllocCluster& cluster, AllocPolicy& policy, Placements& placements,
                                    const MigrationLimits& limits) {
  if (pod.kind() == PodKind::kCpuOnly) return std::nullopt;
  const std::vector<Hole> holes = holes_of(cluster);
  std::vector<Eviction> options;
  for (NodeIndex n = 0; n < cluster.node_count(); ++n) {
    Eviction e = plan_eviction(pod, cluster, placements, n, holes, limits);
    if (e.ok) options.push_back(std::move(e));
  }
  std::sort(options.begin(), options.end(), [](const Eviction& a, const Eviction& b) {
    if (a.gpu_milli != b.gpu_milli) return a.gpu_milli < b.gpu_milli;
    if (a.placements.size() != b.placements.size()) return a.placements.size() < b.placements.size();
    return a.node < b.node;
  });
  if (static_cast<int>(options.size()) > limits.candidate_nodes) options.resize(static_cast<size_t>(limits.candidate_nodes));

  for (const Eviction& e : options) {
    for (uint32_t p : e.placements) take_off(p, cluster, policy, placements);
    auto undo = [&](const std::vector<uint32_t>& placed_now) {
      for (auto it = placed_now.rbegin(); it != placed_now.rend(); ++it) take_off(*it, cluster, policy, placements);
      for (uint32_t p : e.placements) {
        Status back = cluster.apply(placements.pod(p), placements.choice(p));
        CNLAB_CHECK_MSG(back.has_value(), "an undone move must fit where the pod was");
        policy.on_restored(p);
        placements.restore(p);
      }
    };
    std::vector<uint32_t> placed_now;
    std::optional<Choice> here;
    if (cluster.fits(pod, e.node)) here = policy.place_on(pod, cluster, e.node);
    if (!here || here->node != e.node || !cluster.apply(pod, *here)) {
      undo(placed_now);
      continue;
    }
    policy.on_placed(pod, *here);
    placed_now.push_back(placements.add(pod, *here));
    bool all_moved = true;
    for (uint32_t p : e.placements) {
      auto moved = place_anywhere(placements.pod(p), cluster, policy, placements);
      if (!moved) {
        all_moved = false;
        break;
      }
      placed_now.push_back(*moved);
    }
    if (all_moved) return static_cast<int>(e.placements.size());
    undo(placed_now);
  }
  return std::nullopt;
}

}  // namespace cnlab::sim
