#include "sched/preemption.h"

#include <algorithm>
#include <tuple>

#include "sched/node_fit.h"

namespace cnlab::sched {
namespace {

// Fewest victims, then the mildest (the most important victim in the lowest tier possible), then
// fewest that lose all their work, then least work lost, then the lower node index.
struct SetCost {
  size_t count = 0;
  int best_tier = 0;  // the highest-priority tier among the victims (negated when compared)
  int not_checkpointable = 0;
  int64_t work_lost = 0;
  uint32_t node = 0;

  auto key() const { return std::tuple(count, -best_tier, not_checkpointable, work_lost, node); }
};

}  // namespace

Duration VictimSelector::work_lost(const JobInfo& job) const {
  return now_ - (job.checkpointable ? job.last_checkpoint : job.started);
}

void VictimSelector::index_candidates(const ClusterState& state) const {
  candidates_.clear();
  node_begin_.assign(state.node_count() + 1, 0);
  for (uint32_t n = 0; n < state.node_count(); ++n) {
    node_begin_[n] = static_cast<uint32_t>(candidates_.size());
    for (uint32_t a : state.node_allocations(n)) {
      const JobInfo& v = jobs_[state.allocation(a).job];
      if (v.running && !v.moved && now_ - v.started >= v.min_runtime) {
        candidates_.push_back({-v.tier, !v.checkpointable, work_lost(v).count(), v.index, a});
      }
    }
    std::sort(candidates_.begin() + node_begin_[n], candidates_.end(),
              [](const Candidate& a, const Candidate& b) { return a.key() < b.key(); });
  }
  node_begin_[state.node_count()] = static_cast<uint32_t>(candidates_.size());
}

std::optional<VictimSet> VictimSelector::choose(ClusterState& state, const PlacementSearch& search,
                                                const JobShape& shape, int tier, Time end) const {
  if (shape.kind == model::SliceKind::kWhole) {
    bool fits_a_node = false;
    for (int m = 0; m < model::kMaxModels; ++m) {
      auto id = static_cast<model::ModelId>(m);
      fits_a_node =
          fits_a_node || (model::mask_allows(shape.models, id) && state.max_gpus_per_node(id) >= shape.gpu_count);
    }
    if (!fits_a_node) return std::nullopt;  // multi-node gangs do not pre-empt
  }

  // Rank every node by the victims a light model says it needs; verify the best few for real.
  // Only the kVerified cheapest are kept, and a node's greedy stops once it needs more victims than
  // the worst kept set.
  constexpr size_t kVerified = 8;
  std::vector<std::pair<SetCost, std::vector<uint32_t>>> ranked;
  std::vector<uint32_t> victims;
  NodeFit light(state, shape, true);
  auto worse = [](const auto& a, const auto& b) { return a.first.key() < b.first.key(); };
  if (node_begin_.size() != state.node_count() + 1) index_candidates(state);
  for (uint32_t n = 0; n < state.node_count(); ++n) {
    const uint32_t first = node_begin_[n], last = node_begin_[n + 1];
    if (first == last || -candidates_[first].neg_tier <= tier) continue;  // nothing below `tier`
    if (!could_host(state.node(n), shape)) continue;
    size_t max_count = ranked.size() < kVerified ? SIZE_MAX : ranked.back().first.count;
    light.load(n);
    if (!light.relevant()) continue;
    SetCost cost{0, INT32_MAX, 0, 0, n};
    bool fits = false;
    victims.clear();
    for (uint32_t i = first; i < last; ++i) {
      const Candidate& c = candidates_[i];
      if (-c.neg_tier <= tier || cost.count >= max_count) break;
      if (!state.allocation(c.allocation).live) continue;  // evicted earlier in the cycle
      light.take(state.allocation(c.allocation));
      victims.push_back(c.allocation);
      ++cost.count;
      cost.best_tier = std::min(cost.best_tier, -c.neg_tier);
      cost.not_checkpointable += c.not_checkpointable ? 1 : 0;
      cost.work_lost += c.work_lost;
      if ((fits = light.fits())) break;
    }
    if (!fits) continue;
    if (ranked.size() == kVerified) {
      if (!worse(std::pair(cost, victims), ranked.back())) continue;
      ranked.pop_back();
    }
    auto at = std::upper_bound(ranked.begin(), ranked.end(), std::pair(cost, victims), worse);
    ranked.insert(at, {cost, victims});
  }

  for (size_t i = 0; i < ranked.size() && i < kVerified; ++i) {
    auto& [cost, chosen] = ranked[i];
    for (uint32_t a : chosen) state.release(a);
    auto plan = search.find_on_node(shape, cost.node, now_, end);
    if (!plan) {
      for (uint32_t a : chosen) state.restore(a);
      continue;
    }
    // Spare the victims the job turns out not to need, the most expensive first.
    std::vector<uint32_t> needed;
    for (size_t k = chosen.size(); k-- > 0;) {
      state.restore(chosen[k]);
      if (auto without = search.find_on_node(shape, cost.node, now_, end)) {
        plan = std::move(without);
      } else {
        state.release(chosen[k]);
        needed.push_back(chosen[k]);
      }
    }
    for (uint32_t a : needed) state.restore(a);
    VictimSet set;
    set.node = cost.node;
    set.plan = std::move(*plan);
    for (auto it = needed.rbegin(); it != needed.rend(); ++it) set.victims.push_back(state.allocation(*it).job);
    return set;
  }
  return std::nullopt;
}

}  // namespace cnlab::sched
