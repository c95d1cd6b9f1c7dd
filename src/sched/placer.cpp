#include "sched/placer.h"

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
