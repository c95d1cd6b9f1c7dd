#include "sim/alloc_migration.h"

#include <algorithm>
#include <array>
#include <bit>
#include <span>

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

namespace {

std::optional<int> move_into_holes(const Pod& pod, AllocCluster& cluster, AllocPolicy& policy, Placements& placements,
                                   const MigrationLimits& limits) {
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


// -- Re-pack ---------------------------------------------------------------------------------------

// One GPU of a re-pack: where it is and what the plan leaves free on it.
struct Slot {
  NodeIndex node;
  int gpu;
  int free;
};

// Free host CPU and memory of a node the re-pack touches, as the plan leaves them.
struct HostFree {
  NodeIndex node;
  int64_t cpu, mem;
};

struct Repack {
  Choice target;                                   // where the pod that needed room goes
  std::vector<std::pair<uint32_t, Choice>> moves;  // placement -> its new place (another GPU)
};

class RepackPlanner {
 public:
  RepackPlanner(const AllocCluster& cluster, const Placements& placements) : cluster_(cluster), placements_(placements) {}

  // Plans `pod` onto `target` (the GPUs it takes: one for a sharing pod, num_gpu fully free ones after
  // the re-pack for a whole-GPU pod) with the GPUs of `pool` re-packed around it; false when some pod
  // would be left without a place, a whole-GPU pod would have to move, or more than `max_moves` move.
  bool plan(const Pod& pod, const Choice& target, std::span<const Slot> pool, int max_moves, Repack& out) {
    slots_.clear();
    hosts_.clear();
    pods_.clear();
    for (int g = 0; g < cluster_.gpu_count(target.node); ++g) add_slot(target.node, g);
    for (const Slot& s : pool) add_slot(s.node, s.gpu);
    // The sharing pods on those GPUs come off, and for a pod asking several whole GPUs, the one-GPU
    // whole pods too (a gang's room is worth moving one; other whole-GPU pods stay where they are).
    for (size_t i = 0; i < slots_.size(); ++i) {
      for (uint32_t p : placements_.on_node(slots_[i].node)) {
        const Pod& q = placements_.pod(p);
        bool movable = q.kind() == PodKind::kSharing || (q.kind() == PodKind::kWholeGpu && q.num_gpu == 1 && pod.num_gpu > 1);
        if (!movable || !((placements_.choice(p).gpus >> slots_[i].gpu) & 1)) continue;
        pods_.push_back({p, i});
      }
    }
    for (const Held& h : pods_) {
      const Pod& q = placements_.pod(h.placement);
      slots_[h.slot].free += q.gpu_milli;
      HostFree& host = host_of(slots_[h.slot].node);
      host.cpu += q.cpu_milli;
      host.mem += q.memory_mib;
    }
    // The pod first, where it was asked to go.
    HostFree& target_host = host_of(target.node);
    if (target_host.cpu < pod.cpu_milli || target_host.mem < pod.memory_mib) return false;
    const int need = pod.kind() == PodKind::kWholeGpu ? kGpuMilli : pod.gpu_milli;
    for (int g = 0; g < cluster_.gpu_count(target.node); ++g) {
      if (!((target.gpus >> g) & 1)) continue;
      Slot& s = slots_[static_cast<size_t>(g)];
      if (s.free < need) return false;
      s.free -= need;
    }
    target_host.cpu -= pod.cpu_milli;
    target_host.mem -= pod.memory_mib;
    // Then the others, largest first, each staying where it was when there is still room, else on
    // the tightest GPU that holds it (its own node first among equals).
    std::sort(pods_.begin(), pods_.end(), [&](const Held& a, const Held& b) {
      const Pod& qa = placements_.pod(a.placement);
      const Pod& qb = placements_.pod(b.placement);
      if (qa.gpu_milli != qb.gpu_milli) return qa.gpu_milli > qb.gpu_milli;
      if (qa.cpu_milli != qb.cpu_milli) return qa.cpu_milli > qb.cpu_milli;
      return a.placement < b.placement;
    });
    out.target = target;
    out.moves.clear();
    for (const Held& h : pods_) {
      const Pod& q = placements_.pod(h.placement);
      size_t best = slots_.size();
      if (room(q, h.slot)) {
        best = h.slot;
      } else {
        for (size_t i = 0; i < slots_.size(); ++i) {
          if (!room(q, i)) continue;
          if (best == slots_.size() || slots_[i].free < slots_[best].free ||
              (slots_[i].free == slots_[best].free && slots_[i].node == slots_[h.slot].node &&
               slots_[best].node != slots_[h.slot].node)) {
            best = i;
          }
        }
      }
      if (best == slots_.size()) return false;
      Slot& s = slots_[best];
      s.free -= q.gpu_milli;
      HostFree& host = host_of(s.node);
      host.cpu -= q.cpu_milli;
      host.mem -= q.memory_mib;
      if (best != h.slot) {
        out.moves.push_back({h.placement, Choice{s.node, uint32_t{1} << s.gpu}});
        if (static_cast<int>(out.moves.size()) > max_moves) return false;
      }
    }
    return true;
  }

 private:
  struct Held {
    uint32_t placement;
    size_t slot;  // where it is now
  };

  void add_slot(NodeIndex node, int gpu) {
    for (const Slot& s : slots_) {
      if (s.node == node && s.gpu == gpu) return;
    }
    slots_.push_back({node, gpu, cluster_.gpu_free(node)[static_cast<size_t>(gpu)]});
    host_of(node);
  }
  HostFree& host_of(NodeIndex node) {
    for (HostFree& h : hosts_) {
      if (h.node == node) return h;
    }
    hosts_.push_back({node, cluster_.cpu_free(node), cluster_.memory_free(node)});
    return hosts_.back();
  }
  bool room(const Pod& q, size_t i) {
    const Slot& s = slots_[i];
    if (s.free < q.gpu_milli || !cluster_.model_allowed(q.allowed_models, s.node)) return false;
    const HostFree& h = host_of(s.node);
    return h.cpu >= q.cpu_milli && h.mem >= q.memory_mib;
  }

  const AllocCluster& cluster_;
  const Placements& placements_;
  std::vector<Slot> slots_;  // the target node's GPUs first, by index, then the pool's
  std::vector<HostFree> hosts_;
  std::vector<Held> pods_;
};

// Whether GPU g of node n holds a whole-GPU pod that may not move for a pod asking `gpus` GPUs: any
// for one GPU, one asking more than one GPU for a gang (RepackPlanner).
bool held_whole(const Placements& placements, NodeIndex n, int g, int gpus) {
  for (uint32_t p : placements.on_node(n)) {
    const Pod& q = placements.pod(p);
    if (q.kind() == PodKind::kWholeGpu && ((placements.choice(p).gpus >> g) & 1) && (gpus == 1 || q.num_gpu > 1)) return true;
  }
  return false;
}

// Places the pod as planned: the moved pods leave first, then the pod and the moved pods land. Undone
// (and false) when a policy cannot follow.
bool carry_out(const Pod& pod, const Repack& plan, AllocCluster& cluster, AllocPolicy& policy, Placements& placements) {
  for (const auto& [p, to] : plan.moves) take_off(p, cluster, policy, placements);
  std::vector<uint32_t> placed_now;
  auto land = [&](const Pod& q, const Choice& at) {
    if (!policy.place_at(q, cluster, at)) return false;
    Status applied = cluster.apply(q, at);
    CNLAB_CHECK_MSG(applied.has_value(), "a planned re-pack must fit: " + (applied ? "" : applied.error().message));
    policy.on_placed(q, at);
    placed_now.push_back(placements.add(q, at));
    return true;
  };
  bool ok = land(pod, plan.target);
  for (size_t i = 0; ok && i < plan.moves.size(); ++i) ok = land(placements.pod(plan.moves[i].first), plan.moves[i].second);
  if (ok) return true;
  for (auto it = placed_now.rbegin(); it != placed_now.rend(); ++it) take_off(*it, cluster, policy, placements);
  for (const auto& [p, to] : plan.moves) {
    Status back = cluster.apply(placements.pod(p), placements.choice(p));
    CNLAB_CHECK_MSG(back.has_value(), "an undone re-pack must fit where the pod was");
    policy.on_restored(p);
    placements.restore(p);
  }
  return false;
}

std::optional<int> repack_to_place(const Pod& pod, AllocCluster& cluster, AllocPolicy& policy, Placements& placements,
                                   const MigrationLimits& limits) {
  if (limits.repack_targets <= 0 || limits.repack_moves <= 0) return std::nullopt;
  const bool whole = pod.kind() == PodKind::kWholeGpu;
  // Where the pod could go, fewest milli to clear first: a sharing pod on one GPU, a whole-GPU pod on
  // the num_gpu emptiest GPUs of a node that holds no whole-GPU pod on them.
  struct Target {
    Choice choice;
    int64_t to_clear;
  };
  std::vector<Target> targets;
  std::vector<Slot> holes;
  for (NodeIndex n = 0; n < cluster.node_count(); ++n) {
    const int gpus = cluster.gpu_count(n);
    if (gpus == 0) continue;
    auto free = cluster.gpu_free(n);
    for (int g = 0; g < gpus; ++g) {
      if (free[static_cast<size_t>(g)] > 0) holes.push_back({n, g, free[static_cast<size_t>(g)]});
    }
    if (!cluster.model_allowed(pod.allowed_models, n) || gpus < pod.num_gpu) continue;
    if (cluster.cpu_capacity(n) < pod.cpu_milli || cluster.memory_capacity(n) < pod.memory_mib) continue;
    if (!whole) {
      for (int g = 0; g < gpus; ++g) {
        int f = free[static_cast<size_t>(g)];
        if (f > 0) targets.push_back({Choice{n, uint32_t{1} << g}, pod.gpu_milli - f});
      }
      continue;
    }
    // The emptiest num_gpu GPUs that no whole-GPU pod holds (a full GPU may be full of sharing pods).
    std::array<int, 32> order{};
    for (int g = 0; g < gpus; ++g) order[static_cast<size_t>(g)] = g;
    std::stable_sort(order.begin(), order.begin() + gpus,
                     [&](int a, int b) { return free[static_cast<size_t>(a)] > free[static_cast<size_t>(b)]; });
    Target t{Choice{n, 0}, 0};
    int taken = 0;
    for (int i = 0; i < gpus && taken < pod.num_gpu; ++i) {
      int g = order[static_cast<size_t>(i)];
      if (free[static_cast<size_t>(g)] == 0 && held_whole(placements, n, g, pod.num_gpu)) continue;
      t.choice.gpus |= uint32_t{1} << g;
      t.to_clear += kGpuMilli - free[static_cast<size_t>(g)];
      ++taken;
    }
    if (taken == pod.num_gpu) targets.push_back(t);
  }
  auto by_clear = [&](const Target& a, const Target& b) {
    if (a.to_clear != b.to_clear) return a.to_clear < b.to_clear;
    if (cluster.rank(a.choice.node) != cluster.rank(b.choice.node)) return cluster.rank(a.choice.node) < cluster.rank(b.choice.node);
    return a.choice.gpus < b.choice.gpus;
  };
  const size_t keep_targets = std::min(targets.size(), static_cast<size_t>(limits.repack_targets));
  std::partial_sort(targets.begin(), targets.begin() + static_cast<std::ptrdiff_t>(keep_targets), targets.end(), by_clear);
  targets.resize(keep_targets);
  auto by_free = [&](const Slot& a, const Slot& b) {
    if (a.free != b.free) return a.free > b.free;
    if (cluster.rank(a.node) != cluster.rank(b.node)) return cluster.rank(a.node) < cluster.rank(b.node);
    return a.gpu < b.gpu;
  };
  // The pool: the GPUs with the most free milli (one spare for each target GPU it must skip).
  const size_t keep_holes = std::min(holes.size(), static_cast<size_t>(limits.repack_pool) + 8);
  std::partial_sort(holes.begin(), holes.begin() + static_cast<std::ptrdiff_t>(keep_holes), holes.end(), by_free);
  holes.resize(keep_holes);

  RepackPlanner planner(cluster, placements);
  std::vector<Slot> pool;
  Repack best, plan;
  bool found = false;
  for (const Target& t : targets) {
    pool.clear();
    for (const Slot& h : holes) {
      if (h.node != t.choice.node && static_cast<int>(pool.size()) < limits.repack_pool) pool.push_back(h);
    }
    if (!planner.plan(pod, t.choice, pool, limits.repack_moves, plan)) continue;
    if (!found || plan.moves.size() < best.moves.size()) {
      best = plan;
      found = true;
      if (best.moves.empty()) break;
    }
  }
  if (!found || !carry_out(pod, best, cluster, policy, placements)) return std::nullopt;
  return static_cast<int>(best.moves.size());
}

}  // namespace

std::optional<int> migrate_to_place(const Pod& pod, AllocCluster& cluster, AllocPolicy& policy, Placements& placements,
                                    const MigrationLimits& limits) {
  if (pod.kind() == PodKind::kCpuOnly) return std::nullopt;
  if (auto moved = move_into_holes(pod, cluster, policy, placements, limits)) return moved;
  return repack_to_place(pod, cluster, policy, placements, limits);
}

}  // namespace cnlab::sim
