#include "sched/placer.h"

#include <bit>
#include <unordered_map>

#include "sched/calendar.h"
#include "sched/cluster_state.h"
#include "sched/job_shape.h"
#include "sched/packing.h"
#include "sched/placement.h"
#include "sched/workload_profile.h"

namespace cnlab::sched {

struct Placer::Impl {
  Impl(std::vector<model::Node> n, PolicyConfig c)
      : nodes(std::move(n)),
        config(std::move(c)),
        state(nodes),
        calendar(state.node_count()),
        scorer(&profile),
        search(state, calendar, scorer, SearchLimits::of(config)) {}

  std::vector<model::Node> nodes;
  PolicyConfig config;
  ClusterState state;
  Calendar calendar;  // stays empty: nothing is reserved ahead
  WorkloadProfile profile;
  PackingScorer scorer;
  PlacementSearch search;
  // Each placed job's allocation ids, for release and restore.
  std::unordered_map<JobIndex, std::vector<uint32_t>> held;

  std::optional<std::vector<NodeGrant>> take(const std::optional<Plan>& plan, const JobShape& shape, JobIndex job) {
    if (!plan) return std::nullopt;
    Applied applied = apply_plan(state, calendar, *plan, job, shape.kind == model::SliceKind::kMig, Time{}, kNever);
    for (const Repartition& r : applied.repartitions) {
      nodes[r.node].gpus[r.gpu].mig_enabled = r.mig_enabled;
      nodes[r.node].gpus[r.gpu].mig_instances = r.instances;
    }
    held[job] = applied.allocations;
    return std::move(applied.grants);
  }
};

Placer::Placer(std::vector<model::Node> nodes, PolicyConfig config)
    : impl_(std::make_unique<Impl>(std::move(nodes), std::move(config))) {}

Placer::~Placer() = default;

const std::vector<model::Node>& Placer::nodes() const { return impl_->nodes; }

void Placer::observe(const model::JobSpec& spec) { impl_->profile.add(JobShape::of(spec)); }

std::optional<std::vector<NodeGrant>> Placer::place(const model::JobSpec& spec, JobIndex job) {
  JobShape shape = JobShape::of(spec);
  return impl_->take(impl_->search.find(shape, Time{}, kNever), shape, job);
}

std::optional<std::vector<NodeGrant>> Placer::place_on(const model::JobSpec& spec, uint32_t node, JobIndex job) {
  JobShape shape = JobShape::of(spec);
  return impl_->take(impl_->search.find_on_node(shape, node, Time{}, kNever), shape, job);
}

std::optional<std::vector<NodeGrant>> Placer::place_at(const model::JobSpec& spec, uint32_t node,
                                                       uint32_t gpu_indexes, JobIndex job) {
  JobShape shape = JobShape::of(spec);
  const ClusterState& state = impl_->state;
  if (node >= state.node_count() || shape.kind == model::SliceKind::kMig) return std::nullopt;
  const NodeState& n = state.node(node);
  if (!n.schedulable || n.cpu_free < shape.cpu_milli || n.mem_free < shape.memory_mib) return std::nullopt;
  PlannedNode planned{node, shape.cpu_milli, shape.memory_mib, {}};
  const int wanted = shape.kind == model::SliceKind::kNone ? 0 : shape.kind == model::SliceKind::kBlocks ? 1 : shape.gpu_count;
  if (std::popcount(gpu_indexes) != wanted) return std::nullopt;
  for (uint32_t g = n.gpu_begin; g < n.gpu_end; ++g) {
    const GpuState& gpu = state.gpu(g);
    if (!((gpu_indexes >> gpu.index) & 1)) continue;
    if (gpu.whole == kNone || !gpu.healthy || !model::mask_allows(shape.models, gpu.model)) return std::nullopt;
    const PartitionState& part = state.partition(gpu.whole);
    if (shape.kind == model::SliceKind::kWhole) {
      if (!part.empty()) return std::nullopt;
      planned.uses.push_back({gpu.whole, part.total_blocks, part.total_mem});
    } else {
      int64_t mem = shape.vram_mib >= 0 ? shape.vram_mib : state.default_mem(part, shape.blocks);
      if (part.exclusive || part.free_blocks < shape.blocks || part.free_mem < mem) return std::nullopt;
      planned.uses.push_back({gpu.whole, static_cast<int16_t>(shape.blocks), mem});
    }
  }
  if (static_cast<int>(planned.uses.size()) != wanted) return std::nullopt;
  Plan plan;
  plan.nodes.push_back(std::move(planned));
  return impl_->take(plan, shape, job);
}

void Placer::release(JobIndex job) {
  auto it = impl_->held.find(job);
  if (it == impl_->held.end()) return;
  for (uint32_t a : it->second) impl_->state.release(a);
}

void Placer::restore(JobIndex job) {
  auto it = impl_->held.find(job);
  if (it == impl_->held.end()) return;
  for (uint32_t a : it->second) impl_->state.restore(a);
}

}  // namespace cnlab::sched
