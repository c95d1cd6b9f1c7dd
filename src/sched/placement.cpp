#include "sched/placement.h"

#include <algorithm>
#include <array>

#include "common/check.h"

namespace cnlab::sched {

struct PlacementSearch::Best {
  std::optional<Plan> plan;
  int feasible = 0;
  uint32_t scored = 0;
  uint32_t hold_rejections = 0;
  int limit = 1;
  std::vector<PartUse> scratch;
  std::vector<uint32_t> seen;  // whole-GPU entries the first pass scored

  bool full() const { return feasible >= limit; }
  // Counts a feasible candidate and keeps it when it beats the best so far (built only then). The
  // first of equal costs wins, so the search order (tightest bucket, then index) breaks ties.
  template <typename MakeNode>
  void consider(double cost, MakeNode make_node) {
    ++feasible;
    ++scored;
    if (plan && cost >= plan->cost) return;
    plan = Plan{{make_node()}, cost};
  }
};

bool PlacementSearch::host_fits(const JobShape& shape, uint32_t node, int64_t cpu, int64_t mem) const {
  const NodeState& n = state_.node(node);
  return n.cpu_free >= cpu && n.mem_free >= mem && has_traits(n.traits, shape.node_traits);
}

bool PlacementSearch::calendar_allows(uint32_t node, Time now, Time end, int64_t cpu, int64_t mem,
                                      std::span<const PartUse> uses, Best& best) const {
  if (calendar_.allows(node, now, end, cpu, mem, uses)) return true;
  ++best.hold_rejections;
  return false;
}

namespace {

model::ModelMask present_models(const ClusterState& state, model::ModelMask wanted) {
  model::ModelMask present = 0;
  for (int m = 0; m < model::kMaxModels; ++m) {
    auto id = static_cast<model::ModelId>(m);
    if (state.total_gpus(id) > 0 && model::mask_allows(wanted, id)) present |= model::model_bit(id);
  }
  return present;
}

}  // namespace

// Whether a block slice of `shape` fits partition `p` now; fills `use` when it does.
bool PlacementSearch::block_fits(const JobShape& shape, uint32_t p, Time now, Time end, Best& best,
                                 PartUse& use) const {
  const PartitionState& part = state_.partition(p);
  if (!host_fits(shape, part.node, shape.cpu_milli, shape.memory_mib)) return false;
  int64_t mem = shape.vram_mib >= 0 ? shape.vram_mib : state_.default_mem(part, shape.blocks);
  if (part.free_mem < mem) return false;
  use = PartUse{p, static_cast<int16_t>(shape.blocks), mem};
  return calendar_allows(part.node, now, end, shape.cpu_milli, shape.memory_mib, {&use, 1}, best);
}

void PlacementSearch::score_block(const JobShape& shape, const PartUse& use, Best& best) const {
  const PartitionState& part = state_.partition(use.partition);
  CandidateView view{part.node, {&use, 1}, shape.cpu_milli, shape.memory_mib, part.empty() ? 1 : 0, 0};
  best.consider(scorer_.cost(state_, shape, view), [&] {
    return PlannedNode{part.node, shape.cpu_milli, shape.memory_mib, {use}};
  });
}

void PlacementSearch::blocks(const JobShape& shape, Time now, Time end, Best& best) const {
  // Inside a bucket the models take turns, so the candidate limit samples every model the request
  // accepts, not only the first one in catalog order.
  struct Cursor {
    const IndexSet* bucket;
    uint32_t next;
  };
  std::array<Cursor, model::kMaxModels> cursors;
  model::ModelMask models = present_models(state_, shape.models);
  PartUse use;
  for (int b = shape.blocks; b <= model::kBlocksPerGpu && !best.full(); ++b) {
    size_t open = 0;
    for (model::ModelMask rest = models; rest != 0; rest &= rest - 1) {
      const IndexSet& bucket = state_.bucket(static_cast<model::ModelId>(__builtin_ctz(rest)), b);
      cursors[open++] = {&bucket, bucket.first()};
    }
    while (open > 0 && !best.full()) {
      for (size_t i = 0; i < open && !best.full();) {
        Cursor& c = cursors[i];
        while (c.next != IndexSet::kEnd) {
          uint32_t p = c.next;
          c.next = c.bucket->next(p + 1);
          if (!block_fits(shape, p, now, end, best, use)) continue;
          score_block(shape, use, best);
          break;
        }
        if (c.next == IndexSet::kEnd)
          cursors[i] = cursors[--open];  // exhausted: drop it
        else
          ++i;
      }
    }
  }
}

void PlacementSearch::blocks_on_node(const JobShape& shape, uint32_t node, Time now, Time end, Best& best) const {
  const NodeState& n = state_.node(node);
  PartUse use;
  auto consider = [&](uint32_t p) {
    const PartitionState& part = state_.partition(p);
    if (part.indexed_at < shape.blocks || !model::mask_allows(shape.models, part.model)) return;
    if (block_fits(shape, p, now, end, best, use)) score_block(shape, use, best);
  };
  for (uint32_t g = n.gpu_begin; g < n.gpu_end; ++g) {
    const GpuState& gpu = state_.gpu(g);
    if (gpu.whole != kNone)
      consider(gpu.whole);
    else
      for (uint32_t p : state_.mig_gpu(gpu.mig).partitions) consider(p);
  }
}

void PlacementSearch::whole_on_node(const JobShape& shape, uint32_t node, model::ModelId model, Time now, Time end,
                                    Best& best) const {
  if (!host_fits(shape, node, shape.cpu_milli, shape.memory_mib)) return;
  const NodeState& n = state_.node(node);
  best.scratch.clear();
  for (uint32_t g = n.gpu_begin; g < n.gpu_end && static_cast<int>(best.scratch.size()) < shape.gpu_count; ++g) {
    const GpuState& gpu = state_.gpu(g);
    if (gpu.model != model || gpu.whole == kNone || !gpu.healthy) continue;
    const PartitionState& part = state_.partition(gpu.whole);
    if (!part.empty()) continue;
    PartUse use{gpu.whole, part.total_blocks, part.total_mem};
    // Skip GPUs a reservation holds: another free GPU of the node may do.
    if (!calendar_allows(node, now, end, 0, 0, {&use, 1}, best)) continue;
    best.scratch.push_back(use);
  }
  if (static_cast<int>(best.scratch.size()) < shape.gpu_count) return;
  if (!calendar_allows(node, now, end, shape.cpu_milli, shape.memory_mib, best.scratch, best)) return;
  CandidateView view{node, best.scratch, shape.cpu_milli, shape.memory_mib, shape.gpu_count, 0};
  best.consider(scorer_.cost(state_, shape, view), [&] {
    return PlannedNode{node, shape.cpu_milli, shape.memory_mib, best.scratch};
  });
}

void PlacementSearch::whole_single(const JobShape& shape, Time now, Time end, Best& best) const {
  model::ModelMask models = present_models(state_, shape.models);
  // Fewest free whole GPUs first: fill partly used nodes and keep empty ones whole. A first pass
  // gives each model an equal share of the candidate limit, so the scorer weighs the tightest nodes
  // of every model (not only those of the model that comes first); a second pass fills the rest.
  int usable = 0;
  for (model::ModelMask rest = models; rest != 0; rest &= rest - 1) {
    usable += state_.max_gpus_per_node(static_cast<model::ModelId>(__builtin_ctz(rest))) >= shape.gpu_count;
  }
  const int share = std::max(1, (best.limit + usable - 1) / std::max(1, usable));
  std::array<int, model::kMaxModels> scored{};
  std::vector<uint32_t>& seen = best.seen;
  seen.clear();
  for (int pass = 0; pass < 2 && !best.full(); ++pass) {
    for (int count = std::min(shape.gpu_count, ClusterState::kWholeBuckets - 1);
         count < ClusterState::kWholeBuckets && !best.full(); ++count) {
      for (model::ModelMask rest = models; rest != 0 && !best.full(); rest &= rest - 1) {
        auto m = static_cast<model::ModelId>(__builtin_ctz(rest));
        if (state_.max_gpus_per_node(m) < shape.gpu_count) continue;
        const IndexSet& bucket = state_.whole_bucket(m, count);
        for (uint32_t e = bucket.first(); e != IndexSet::kEnd && !best.full(); e = bucket.next(e + 1)) {
          if (pass == 0 && scored[m] >= share) break;
          if (pass == 1 && std::find(seen.begin(), seen.end(), e) != seen.end()) continue;
          int before = best.feasible;
          whole_on_node(shape, state_.whole_entry_node(e), m, now, end, best);
          if (pass == 0 && best.feasible > before) {
            ++scored[m];
            seen.push_back(e);
          }
        }
      }
    }
  }
}

void PlacementSearch::whole_multi(const JobShape& shape, Time now, Time end, Best& best) const {
  // A gang larger than any node of its model: whole nodes first (fewest nodes), all or nothing.
  model::ModelMask models = present_models(state_, shape.models);
  for (model::ModelMask rest = models; rest != 0; rest &= rest - 1) {
    auto m = static_cast<model::ModelId>(__builtin_ctz(rest));
    if (state_.max_gpus_per_node(m) >= shape.gpu_count) continue;
    Plan plan;
    int gathered = 0;
    for (int count = ClusterState::kWholeBuckets - 1; count > 0 && gathered < shape.gpu_count; --count) {
      const IndexSet& bucket = state_.whole_bucket(m, count);
      for (uint32_t e = bucket.first(); e != IndexSet::kEnd && gathered < shape.gpu_count; e = bucket.next(e + 1)) {
        uint32_t node = state_.whole_entry_node(e);
        const NodeState& n = state_.node(node);
        PlannedNode planned{node, 0, 0, {}};
        for (uint32_t g = n.gpu_begin;
             g < n.gpu_end && gathered + static_cast<int>(planned.uses.size()) < shape.gpu_count; ++g) {
          const GpuState& gpu = state_.gpu(g);
          if (gpu.model != m || gpu.whole == kNone || !gpu.healthy || !state_.partition(gpu.whole).empty()) continue;
          planned.uses.push_back({gpu.whole, model::kBlocksPerGpu, state_.partition(gpu.whole).total_mem});
        }
        // Host resources are split in proportion to the GPUs each node gets (rounded up).
        int k = static_cast<int>(planned.uses.size());
        planned.cpu = (shape.cpu_milli * k + shape.gpu_count - 1) / shape.gpu_count;
        planned.mem = (shape.memory_mib * k + shape.gpu_count - 1) / shape.gpu_count;
        if (k == 0 || !host_fits(shape, node, planned.cpu, planned.mem) ||
            !calendar_allows(node, now, end, planned.cpu, planned.mem, planned.uses, best)) {
          continue;
        }
        gathered += k;
        CandidateView view{node, planned.uses, planned.cpu, planned.mem, k, 0};
        plan.cost += scorer_.cost(state_, shape, view);
        ++best.scored;
        plan.nodes.push_back(std::move(planned));
      }
    }
    if (gathered == shape.gpu_count && (!best.plan || plan.nodes.size() < best.plan->nodes.size())) {
      best.plan = std::move(plan);
      ++best.feasible;
    }
  }
}

void PlacementSearch::mig(const JobShape& shape, Time now, Time end, uint32_t only_node, Best& best) const {
  model::ModelId m = shape.mig_model();
  auto consider = [&](uint32_t node, const PlannedNode& planned, std::span<const PartUse> uses, int change) {
    if (!host_fits(shape, node, shape.cpu_milli, shape.memory_mib)) return;
    if (!calendar_allows(node, now, end, shape.cpu_milli, shape.memory_mib, uses, best)) return;
    CandidateView view{node, uses, shape.cpu_milli, shape.memory_mib, 0, change};
    best.consider(scorer_.cost(state_, shape, view), [&] { return planned; });
  };
  // 1. An existing free instance of the profile; 2. a new instance in free slots.
  for (int pass = 0; pass < 2 && !best.full(); ++pass) {
    for (uint32_t g : state_.mig_gpus_of(m)) {
      if (best.full()) break;
      const GpuState& gpu = state_.gpu(g);
      if (only_node != kNone && gpu.node != only_node) continue;
      if (gpu.mig == kNone || !state_.node(gpu.node).schedulable) continue;  // withheld (set_offered)
      const MigGpu& mig = state_.mig_gpu(gpu.mig);
      if (pass == 0) {
        for (uint32_t p : mig.partitions) {
          const PartitionState& part = state_.partition(p);
          if (part.mig_profile != shape.mig_profile || !part.empty() || part.exclusive) continue;
          PartUse use{p, part.total_blocks, part.total_mem};
          consider(gpu.node, PlannedNode{gpu.node, shape.cpu_milli, shape.memory_mib, {use}}, {&use, 1}, 0);
          break;
        }
      } else {
        int start = mig.layout.first_fit(shape.mig_profile);
        if (start < 0) continue;
        PlannedNode planned{gpu.node, shape.cpu_milli, shape.memory_mib, {}, g, false, shape.mig_profile, start};
        consider(gpu.node, planned, {}, 1);
      }
    }
  }
  // 3. An idle whole GPU turned to MIG, on the busiest node that has one.
  if (!limits_.repartition || best.plan) return;
  for (int count = 1; count < ClusterState::kWholeBuckets && !best.full(); ++count) {
    const IndexSet& bucket = state_.whole_bucket(m, count);
    for (uint32_t e = bucket.first(); e != IndexSet::kEnd && !best.full(); e = bucket.next(e + 1)) {
      uint32_t node = state_.whole_entry_node(e);
      if (only_node != kNone && node != only_node) continue;
      const NodeState& n = state_.node(node);
      for (uint32_t g = n.gpu_begin; g < n.gpu_end; ++g) {
        const GpuState& gpu = state_.gpu(g);
        if (gpu.model != m || gpu.whole == kNone || !gpu.healthy || !state_.partition(gpu.whole).empty()) continue;
        PlannedNode planned{node, shape.cpu_milli, shape.memory_mib, {}, g, true, shape.mig_profile, 0};
        consider(node, planned, {}, 2);
        break;
      }
    }
  }
}

// A job without GPUs may go to any node; every node is scored (such jobs are few, and where their
// CPU goes decides which GPUs stay usable).
void PlacementSearch::host_only(const JobShape& shape, Time now, Time end, uint32_t only_node, Best& best) const {
  for (uint32_t n = only_node == kNone ? 0 : only_node; n < state_.node_count(); ++n) {
    if (only_node != kNone && n != only_node) break;
    if (!state_.node(n).schedulable || !host_fits(shape, n, shape.cpu_milli, shape.memory_mib)) continue;
    if (!calendar_allows(n, now, end, shape.cpu_milli, shape.memory_mib, {}, best)) continue;
    CandidateView view{n, {}, shape.cpu_milli, shape.memory_mib, 0, 0};
    best.consider(scorer_.cost(state_, shape, view), [&] {
      return PlannedNode{n, shape.cpu_milli, shape.memory_mib, {}};
    });
  }
}

std::optional<Plan> PlacementSearch::find(const JobShape& shape, Time now, Time end, Stats* stats) const {
  Best best;
  best.limit = limits_.candidates;
  switch (shape.kind) {
    case model::SliceKind::kBlocks: blocks(shape, now, end, best); break;
    case model::SliceKind::kMig: mig(shape, now, end, kNone, best); break;
    case model::SliceKind::kNone: host_only(shape, now, end, kNone, best); break;
    case model::SliceKind::kWhole:
      whole_single(shape, now, end, best);
      if (!best.plan && limits_.span_nodes) whole_multi(shape, now, end, best);
      break;
  }
  if (stats) {
    stats->scored += best.scored;
    stats->hold_rejections += best.hold_rejections;
  }
  return std::move(best.plan);
}

std::optional<Plan> PlacementSearch::find_on_node(const JobShape& shape, uint32_t node, Time now, Time end) const {
  Best best;
  best.limit = limits_.candidates;
  switch (shape.kind) {
    case model::SliceKind::kBlocks: blocks_on_node(shape, node, now, end, best); break;
    case model::SliceKind::kMig: mig(shape, now, end, node, best); break;
    case model::SliceKind::kNone: host_only(shape, now, end, node, best); break;
    case model::SliceKind::kWhole: {
      const NodeState& n = state_.node(node);
      model::ModelMask seen = 0;
      for (uint32_t g = n.gpu_begin; g < n.gpu_end; ++g) {
        model::ModelId m = state_.gpu(g).model;
        if (!model::mask_allows(shape.models, m) || (seen & model::model_bit(m))) continue;
        seen |= model::model_bit(m);
        whole_on_node(shape, node, m, now, end, best);
      }
      break;
    }
  }
  return std::move(best.plan);
}

Applied apply_plan(ClusterState& state, Calendar& calendar, const Plan& plan, JobIndex job, bool exclusive_mig,
                   Time now, Time end) {
  Applied applied;
  for (const PlannedNode& planned : plan.nodes) {
    std::vector<PartUse> uses = planned.uses;
    if (planned.mig_gpu != kNone) {
      const GpuState& gpu = state.gpu(planned.mig_gpu);
      if (planned.enable_mig) state.enable_mig(planned.mig_gpu);
      uint32_t p = state.create_instance(planned.mig_gpu, planned.create_profile, planned.create_start);
      uses.push_back({p, state.partition(p).total_blocks, state.partition(p).total_mem});
      applied.repartitions.push_back(
          {gpu.node, gpu.index, true, state.mig_gpu(state.gpu(planned.mig_gpu).mig).layout.instances()});
    }
    calendar.charge(planned.node, now, end, planned.cpu, planned.mem, uses);
    applied.allocations.push_back(
        state.allocate(job, planned.node, planned.cpu, planned.mem, uses, exclusive_mig, now, end));
    NodeGrant grant{planned.node, {}};
    for (const PartUse& use : uses) {
      const PartitionState& p = state.partition(use.partition);
      grant.gpus.push_back({state.gpu(p.gpu).index, use.blocks, use.mem, p.mig_start});
    }
    applied.grants.push_back(std::move(grant));
  }
  return applied;
}

bool mover_may_take(const Plan& plan) {
  return plan.nodes.size() == 1 && !plan.nodes.front().enable_mig;
}

TentativeHold hold_tentatively(ClusterState& state, const PlannedNode& planned, JobIndex job, bool exclusive_mig,
                               Time now, Time end) {
  CNLAB_CHECK(!planned.enable_mig);
  TentativeHold hold;
  std::vector<PartUse> uses = planned.uses;
  if (planned.mig_gpu != kNone) {
    hold.instance = state.create_instance(planned.mig_gpu, planned.create_profile, planned.create_start);
    uses.push_back({hold.instance, state.partition(hold.instance).total_blocks, state.partition(hold.instance).total_mem});
  }
  hold.allocation = state.allocate(job, planned.node, planned.cpu, planned.mem, uses, exclusive_mig, now, end);
  return hold;
}

void undo_hold(ClusterState& state, const TentativeHold& hold) {
  state.release(hold.allocation);
  if (hold.instance != kNone) state.remove_instance(hold.instance);
}

}  // namespace cnlab::sched
