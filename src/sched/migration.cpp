#include "sched/migration.h"

#include <algorithm>
#include <tuple>

#include "sched/node_fit.h"

namespace cnlab::sched {
namespace {

// Fewest moves, then the cheapest, then the lower node index.
struct Ranked {
  size_t count = 0;
  int64_t cost = 0;
  uint32_t node = 0;
  std::vector<uint32_t> chosen;  // allocation ids, in the order they were taken
  auto key() const { return std::tie(count, cost, node); }
};

}  // namespace

int64_t MoveSelector::cost(const JobInfo& job) const {
  const int below = static_cast<int>(config_.tiers.size()) - 1 - job.tier;
  const int64_t weight = int64_t{1} << std::clamp(below, 0, 20);
  return config_.migration_pause(job.memory_to_copy_mib).count() * weight;
}

std::optional<MoveSet> MoveSelector::choose(ClusterState& state, const PlacementSearch& search, const JobShape& shape,
                                            int tier, Time end, int max_moves) const {
  if (shape.kind == model::SliceKind::kMig || max_moves <= 0) return std::nullopt;
  if (shape.kind == model::SliceKind::kWhole) {
    bool fits_a_node = false;
    for (int m = 0; m < model::kMaxModels; ++m) {
      auto id = static_cast<model::ModelId>(m);
      fits_a_node = fits_a_node || (model::mask_allows(shape.models, id) && state.max_gpus_per_node(id) >= shape.gpu_count);
    }
    if (!fits_a_node) return std::nullopt;  // gangs across nodes do not move others
  }

  constexpr size_t kVerified = 8;
  std::vector<Ranked> ranked;
  NodeFit light(state, shape, false);
  struct Candidate {
    int neg_blocks;
    int64_t cost;
    uint32_t allocation;
    auto key() const { return std::tie(neg_blocks, cost, allocation); }
  };
  std::vector<Candidate> candidates;
  for (uint32_t n = 0; n < state.node_count(); ++n) {
    if (!could_host(state.node(n), shape)) continue;
    light.load(n);
    // Already fitting: what stops the job here is a reservation, which no move changes.
    if (!light.relevant() || light.fits()) continue;
    candidates.clear();
    for (uint32_t a : state.node_allocations(n)) {
      const Allocation& allocation = state.allocation(a);
      const JobInfo& job = jobs_[allocation.job];
      if (job.movable && (config_.move_higher_tiers || job.tier >= tier)) {
        candidates.push_back({-state.held_blocks(allocation), cost(job), a});
      }
    }
    std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) { return a.key() < b.key(); });
    const size_t max_count = ranked.size() < kVerified ? static_cast<size_t>(max_moves)
                                                       : std::min<size_t>(max_moves, ranked.back().count);
    Ranked r{0, 0, n, {}};
    bool fits = false;
    for (const Candidate& c : candidates) {
      if (r.count >= max_count) break;
      light.take(state.allocation(c.allocation));
      r.chosen.push_back(c.allocation);
      ++r.count;
      r.cost += c.cost;
      if ((fits = light.fits())) break;
    }
    if (!fits) continue;
    auto worse = [](const Ranked& a, const Ranked& b) { return a.key() < b.key(); };
    if (ranked.size() == kVerified) {
      if (!worse(r, ranked.back())) continue;
      ranked.pop_back();
    }
    ranked.insert(std::upper_bound(ranked.begin(), ranked.end(), r, worse), std::move(r));
  }
  for (Ranked& r : ranked) {
    if (auto set = verify(state, search, shape, r.node, std::move(r.chosen), end)) return set;
  }
  return std::nullopt;
}

std::optional<MoveSet> MoveSelector::verify(ClusterState& state, const PlacementSearch& search, const JobShape& shape,
                                            uint32_t node, std::vector<uint32_t> chosen, Time end) const {
  for (uint32_t a : chosen) state.release(a);
  auto plan = search.find_on_node(shape, node, now_, end);
  if (!plan) {
    for (uint32_t a : chosen) state.restore(a);
    return std::nullopt;
  }
  // Movers the job turns out not to need stay, the last taken (the smallest) first.
  std::vector<uint32_t> needed;
  for (size_t k = chosen.size(); k-- > 0;) {
    state.restore(chosen[k]);
    if (auto without = search.find_on_node(shape, node, now_, end)) {
      plan = std::move(without);
    } else {
      state.release(chosen[k]);
      needed.push_back(chosen[k]);
    }
  }
  if (needed.empty()) return std::nullopt;  // it fits as things are: no move is needed, none is made
  // The largest mover finds its place first, while the most room is left.
  std::sort(needed.begin(), needed.end(), [&](uint32_t a, uint32_t b) {
    return std::pair(-state.held_blocks(state.allocation(a)), a) < std::pair(-state.held_blocks(state.allocation(b)), b);
  });

  // Hold the job's place, withhold its node, and find every mover a place elsewhere; all of it is
  // undone before returning: the caller applies the set.
  const PlannedNode& here = plan->nodes.front();
  std::vector<TentativeHold> tentative;
  tentative.push_back({state.allocate(state.allocation(needed.front()).job, node, here.cpu, here.mem, here.uses, false,
                                      now_, end)});
  state.set_offered(node, false);
  MoveSet set{node, std::move(*plan), {}};
  bool placed_all = true;
  for (uint32_t a : needed) {
    const JobIndex job = state.allocation(a).job;
    const auto pause = config_.migration_pause(jobs_[job].memory_to_copy_mib);
    const Time job_end = end_after_pause(state.allocation(a).end, pause);
    auto to = search.find(jobs_[job].shape_to_move(), now_, job_end);
    if (!to || !mover_may_take(*to)) {
      placed_all = false;
      break;
    }
    tentative.push_back(hold_tentatively(state, to->nodes.front(), job, jobs_[job].shape.kind == model::SliceKind::kMig,
                                         now_, job_end));
    set.moves.push_back({job, a, std::move(*to), pause, job_end});
  }
  state.set_offered(node, true);
  for (auto it = tentative.rbegin(); it != tentative.rend(); ++it) undo_hold(state, *it);
  for (uint32_t a : needed) state.restore(a);
  if (!placed_all) return std::nullopt;
  return set;
}

}  // namespace cnlab::sched
