#include "sched/placer.h"

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
};

Placer::Placer(std::vector<model::Node> nodes, PolicyConfig config)
    : impl_(std::make_unique<Impl>(std::move(nodes), std::move(config))) {}

Placer::~Placer() = default;

const std::vector<model::Node>& Placer::nodes() const { return impl_->nodes; }

void Placer::observe(const model::JobSpec& spec) { impl_->profile.add(JobShape::of(spec)); }

std::optional<std::vector<NodeGrant>> Placer::place(const model::JobSpec& spec, JobIndex job) {
  JobShape shape = JobShape::of(spec);
  auto plan = impl_->search.find(shape, Time{}, kNever);
  if (!plan) return std::nullopt;
  Applied applied = apply_plan(impl_->state, impl_->calendar, *plan, job, shape.kind == model::SliceKind::kMig,
                               Time{}, kNever);
  for (const Repartition& r : applied.repartitions) {
    impl_->nodes[r.node].gpus[r.gpu].mig_enabled = r.mig_enabled;
    impl_->nodes[r.node].gpus[r.gpu].mig_instances = r.instances;
  }
  return std::move(applied.grants);
}

}  // namespace cnlab::sched
