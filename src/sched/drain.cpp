#include "sched/drain.h"

#include <algorithm>
#include <tuple>

namespace cnlab::sched {
namespace {

// Candidates verified per choice: the lightest few, as moves for room verify the best few nodes.
constexpr size_t kVerified = 8;
// Ends further away than this count as this far when node-time is weighed: a job without an
// estimate never ends, and "for ever" saved against "for ever" kept on would compare nothing.
constexpr Duration kGainHorizon = 7 * kDay;

// The larger of the fractions of a node's GPU blocks, CPU and memory in use: its dominant load.
double load_of(const NodeState& n) {
  double load = 0;
  if (n.blocks_total > 0) load = std::max(load, static_cast<double>(n.blocks_used) / n.blocks_total);
  if (n.cpu_total > 0) load = std::max(load, static_cast<double>(n.cpu_total - n.cpu_free) / static_cast<double>(n.cpu_total));
  if (n.mem_total > 0) load = std::max(load, static_cast<double>(n.mem_total - n.mem_free) / static_cast<double>(n.mem_total));
  return load;
}

// When a node's running work is expected to be over: the latest end of its allocations.
Time busy_until(const ClusterState& state, uint32_t node) {
  Time latest = Time::min();
  for (Time end : state.node_allocation_ends(node)) latest = std::max(latest, end);
  return latest;
}

// A node that runs work and takes new work: where drained jobs may go.
bool busy(const NodeState& n) { return n.schedulable && n.allocations > 0; }

struct Candidate {
  size_t jobs = 0;
  double load = 0;
  int64_t cost = 0;
  uint32_t node = 0;
  auto key() const { return std::tie(jobs, load, cost, node); }
};

}  // namespace

std::optional<Drain> DrainSelector::choose(ClusterState& state, const Calendar& calendar, const PlacementSearch& search,
                                           DrainBudget& budget, std::vector<uint8_t>& skip,
                                           const std::vector<uint8_t>& settling) const {
  const size_t max_jobs = static_cast<size_t>(std::min(budget.moves, config_.max_moves_per_job));
  if (max_jobs == 0) return std::nullopt;
  std::vector<Candidate> candidates;
  for (uint32_t n = 0; n < state.node_count(); ++n) {
    const NodeState& node = state.node(n);
    // A node with a reservation is about to take the reserved job: emptying it powers nothing down.
    if (skip[n] || settling[n] || !busy(node) || !calendar.holds_on(n).empty()) continue;
    const std::vector<uint32_t>& allocations = state.node_allocations(n);
    if (allocations.size() > max_jobs) continue;
    Candidate c{allocations.size(), load_of(node), 0, n};
    bool drainable = true;
    for (uint32_t a : allocations) {
      const Allocation& allocation = state.allocation(a);
      const JobInfo& job = jobs_[allocation.job];
      // A job ending within power_down_after frees the node about as soon as a move would let it
      // power down: it is left to finish, and the node waits for it.
      bool ends_soon = allocation.end != kNever && allocation.end - now_ < config_.power_down_after;
      if (!job.movable || ends_soon) {
        drainable = false;
        break;
      }
      c.cost += prices_.cost(job);
    }
    if (drainable) candidates.push_back(c);
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) { return a.key() < b.key(); });
  for (size_t k = 0; k < candidates.size() && k < kVerified && budget.verifications > 0; ++k) {
    --budget.verifications;
    if (auto drain = verify(state, search, candidates[k].node, settling)) return drain;
    skip[candidates[k].node] = 1;  // the cluster only fills up during the cycle: it fails again
  }
  return std::nullopt;
}

std::optional<Drain> DrainSelector::verify(ClusterState& state, const PlacementSearch& search, uint32_t node,
                                           const std::vector<uint8_t>& settling) const {
  const Time cap = now_ + kGainHorizon;
  auto capped = [&](Time t) { return std::min(t, cap); };
  // Node-time the drain saves: the node would otherwise run until its last job ends.
  Duration gain = capped(busy_until(state, node)) - now_;

  // The largest job finds its place first, while the most room is left.
  std::vector<uint32_t> movers = state.node_allocations(node);
  std::sort(movers.begin(), movers.end(), [&](uint32_t a, uint32_t b) {
    const Allocation &x = state.allocation(a), &y = state.allocation(b);
    return std::tuple(-state.held_blocks(x), -x.mem, -x.cpu, a) < std::tuple(-state.held_blocks(y), -y.mem, -y.cpu, b);
  });

  std::vector<uint32_t> targets;
  for (uint32_t n = 0; n < state.node_count(); ++n) {
    if (n != node && !settling[n] && busy(state.node(n))) targets.push_back(n);
  }
  // Each target's expected end of work, kept up to date as movers land on it.
  std::vector<Time> until(targets.size());
  for (size_t t = 0; t < targets.size(); ++t) until[t] = busy_until(state, targets[t]);
  const std::vector<Time> until_before = until;

  Drain drain{node, {}};
  std::vector<TentativeHold> tentative;
  bool placed_all = true;
  std::vector<size_t> order(targets.size());
  for (uint32_t a : movers) {
    const JobIndex job = state.allocation(a).job;
    const JobShape shape = jobs_[job].shape_to_move();
    const auto pause = config_.migration_pause(jobs_[job].memory_to_copy_mib);
    const Time end = end_after_pause(state.allocation(a).end, pause);
    // First the nodes busy at least as long as the job anyway (gathering long work keeps no node on
    // longer), then the others; fullest first inside each, so the cluster stays packed.
    for (size_t t = 0; t < order.size(); ++t) order[t] = t;
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
      return std::tuple(until[x] < end, -load_of(state.node(targets[x])), targets[x]) <
             std::tuple(until[y] < end, -load_of(state.node(targets[y])), targets[y]);
    });
    std::optional<Plan> to;
    size_t chosen = 0;
    for (size_t t : order) {
      to = search.find_on_node(shape, targets[t], now_, end);
      if (to && mover_may_take(*to)) {
        chosen = t;
        break;
      }
      to.reset();
    }
    if (!to) {
      placed_all = false;
      break;
    }
    tentative.push_back(hold_tentatively(state, to->nodes.front(), job, jobs_[job].shape.kind == model::SliceKind::kMig,
                                         now_, end));
    until[chosen] = std::max(until[chosen], end);
    drain.moves.push_back({job, a, std::move(*to), pause, end});
  }

  bool worth_it = placed_all;
  if (worth_it) {
    // The time the moves keep their targets on beyond their own work is spent, not saved.
    Duration kept_on{0};
    for (size_t t = 0; t < targets.size(); ++t) kept_on += capped(until[t]) - capped(until_before[t]);
    worth_it = gain - kept_on >= config_.power_down_after;
  }
  if (worth_it) {
    // What the nodes that stay busy keep free, with the movers on them and the drained node gone.
    int64_t blocks_total = 0, blocks_free = 0, cpu_total = 0, cpu_free = 0, mem_total = 0, mem_free = 0;
    for (uint32_t n : targets) {
      const NodeState& s = state.node(n);
      blocks_total += s.blocks_total;
      blocks_free += s.blocks_total - s.blocks_used;
      cpu_total += s.cpu_total;
      cpu_free += s.cpu_free;
      mem_total += s.mem_total;
      mem_free += s.mem_free;
    }
    auto keeps = [&](int64_t free, int64_t total) {
      return total == 0 || static_cast<double>(free) >= config_.drain_reserve * static_cast<double>(total);
    };
    worth_it = keeps(blocks_free, blocks_total) && keeps(cpu_free, cpu_total) && keeps(mem_free, mem_total);
  }
  for (auto it = tentative.rbegin(); it != tentative.rend(); ++it) undo_hold(state, *it);
  if (!worth_it) return std::nullopt;
  return drain;
}

}  // namespace cnlab::sched
