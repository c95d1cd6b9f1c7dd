#include "sched/calendar.h"

#include <algorithm>

namespace cnlab::sched {
namespace {

// Whether the hold is still in the future at `from` and starts before `to`: only then must a job
// running [from, to) fit in its slack. A hold already started at `from` is accounted as a running
// job by whoever computed `from`'s free capacity (earliest_start does).
bool overlaps_future_hold(const Hold& h, Time from, Time to) { return h.start > from && h.start < to; }
// The same for a job placed at `from` into the state as it is: a hold starting at `from` itself is
// not in the state, so it must be respected too.
bool overlaps_hold(const Hold& h, Time from, Time to) { return h.start >= from && h.start < to; }

const HoldPart* find_part(const Hold& h, uint32_t partition) {
  for (const HoldPart& p : h.parts) {
    if (p.partition == partition) return &p;
  }
  return nullptr;
}

bool fits_slack(const Hold& h, int64_t cpu, int64_t mem, std::span<const PartUse> uses) {
  if (cpu > h.slack_cpu || mem > h.slack_mem) return false;
  for (const PartUse& use : uses) {
    const HoldPart* p = find_part(h, use.partition);
    if (p && (use.blocks > p->slack_blocks || use.mem > p->slack_mem)) return false;
  }
  return true;
}

}  // namespace

const Hold* Calendar::blocking_hold(uint32_t node, Time from, Time to, int64_t cpu, int64_t mem,
                                    std::span<const PartUse> uses) const {
  for (uint32_t id : by_node_[node]) {
    const Hold& h = holds_[id];
    if (overlaps_hold(h, from, to) && !fits_slack(h, cpu, mem, uses)) return &h;
  }
  return nullptr;
}

bool Calendar::allows(uint32_t node, Time from, Time to, int64_t cpu, int64_t mem,
                      std::span<const PartUse> uses) const {
  return by_node_[node].empty() || blocking_hold(node, from, to, cpu, mem, uses) == nullptr;
}

void Calendar::charge(uint32_t node, Time from, Time to, int64_t cpu, int64_t mem, std::span<const PartUse> uses) {
  for (uint32_t id : by_node_[node]) {
    Hold& h = holds_[id];
    if (!overlaps_hold(h, from, to)) continue;
    h.slack_cpu -= cpu;
    h.slack_mem -= mem;
    for (const PartUse& use : uses) {
      for (HoldPart& p : h.parts) {
        if (p.partition == use.partition) {
          p.slack_blocks -= use.blocks;
          p.slack_mem -= use.mem;
        }
      }
    }
  }
}

namespace {

// The free capacity of one node as it evolves while its running jobs end.
struct NodeTimeline {
  struct Part {
    uint32_t partition;
    int blocks, cap_blocks;
    int64_t mem, cap_mem;
    int jobs;
  };
  std::vector<Part> parts;
  int64_t cpu = 0, mem = 0, cap_cpu = 0, cap_mem = 0;

  Part* find(uint32_t partition) {
    for (Part& p : parts) {
      if (p.partition == partition) return &p;
    }
    return nullptr;
  }
};

}  // namespace

std::optional<EarliestStart> Calendar::earliest_start(const ClusterState& state, const JobShape& shape,
                                                      Duration duration, Time now, bool fits_now_possible) const {
  std::optional<EarliestStart> best;
  NodeTimeline base, at;
  std::vector<uint32_t> releases;
  const int64_t cpu_need = shape.cpu_milli, mem_need = shape.memory_mib;
  for (uint32_t n = 0; n < state.node_count(); ++n) {
    const NodeState& node = state.node(n);
    if (!could_host(node, shape)) continue;
    // Running jobs on the node that end before the best start found so far, earliest first.
    Time horizon = best ? best->start : kNever;
    releases.clear();
    const std::vector<Time>& ends = state.node_allocation_ends(n);
    for (size_t i = 0; i < ends.size(); ++i) {
      if (ends[i] < horizon) releases.push_back(state.node_allocations(n)[i]);
    }
    // Nothing ends here in time, and the shape is known not to fit now: the node cannot do better.
    if (releases.empty() && !fits_now_possible) continue;
    std::sort(releases.begin(), releases.end(), [&](uint32_t x, uint32_t y) {
      return state.allocation(x).end < state.allocation(y).end;
    });
    // Partitions of the node that could ever serve the shape.
    base.parts.clear();
    int whole_candidates = 0;
    for (uint32_t g = node.gpu_begin; g < node.gpu_end; ++g) {
      const GpuState& gpu = state.gpu(g);
      if (!gpu.healthy || !model::mask_allows(shape.models, gpu.model)) continue;
      auto add = [&](uint32_t p) {
        const PartitionState& ps = state.partition(p);
        base.parts.push_back({p, ps.free_blocks, 0, ps.free_mem, 0, ps.jobs});
      };
      if (shape.kind == model::SliceKind::kMig) {
        if (gpu.mig == kNone || gpu.model != shape.mig_model()) continue;
        for (uint32_t p : state.mig_gpu(gpu.mig).partitions) {
          if (state.partition(p).mig_profile == shape.mig_profile) add(p);
        }
      } else if (shape.kind == model::SliceKind::kWhole) {
        if (gpu.whole == kNone) continue;
        add(gpu.whole);
        ++whole_candidates;
      } else {
        if (gpu.whole != kNone) add(gpu.whole);
        else for (uint32_t p : state.mig_gpu(gpu.mig).partitions) add(p);
      }
    }
    if (base.parts.empty() && shape.kind != model::SliceKind::kNone) continue;
    if (shape.kind == model::SliceKind::kWhole && whole_candidates < shape.gpu_count) continue;
    base.cpu = node.cpu_free;
    base.mem = node.mem_free;


    size_t next_release = 0;
    Time t = now;
    while (true) {
      if (best && t >= best->start) break;
      if (t != now || fits_now_possible) {
        // Capacity at t: what is free, less holds running at t, capped by slack of holds ahead.
        at = base;
        Time job_end = end_after(t, duration);
        for (auto& p : at.parts) {
          p.cap_blocks = INT32_MAX;
          p.cap_mem = INT64_MAX;
        }
        at.cap_cpu = at.cap_mem = INT64_MAX;
        for (uint32_t id : by_node_[n]) {
          const Hold& h = holds_[id];
          if (h.start <= t && t < h.end) {
            at.cpu -= h.need_cpu;
            at.mem -= h.need_mem;
            for (const HoldPart& hp : h.parts) {
              if (auto* p = at.find(hp.partition)) {
                p->blocks -= hp.need_blocks;
                p->mem -= hp.need_mem;
                p->jobs += 1;
              }
            }
          } else if (overlaps_future_hold(h, t, job_end)) {
            at.cap_cpu = std::min(at.cap_cpu, h.slack_cpu);
            at.cap_mem = std::min(at.cap_mem, h.slack_mem);
            for (const HoldPart& hp : h.parts) {
              if (auto* p = at.find(hp.partition)) {
                p->cap_blocks = std::min(p->cap_blocks, hp.slack_blocks);
                p->cap_mem = std::min(p->cap_mem, hp.slack_mem);
              }
            }
          }
        }
        bool host_fits = std::min(at.cpu, at.cap_cpu) >= cpu_need && std::min(at.mem, at.cap_mem) >= mem_need;
        EarliestStart found{n, t, {}, cpu_need, mem_need};
        bool fits = false;
        if (host_fits) {
          if (shape.kind == model::SliceKind::kNone) {
            fits = true;
          } else if (shape.kind == model::SliceKind::kBlocks) {
            const NodeTimeline::Part* fit = nullptr;
            for (const auto& p : at.parts) {
              const PartitionState& ps = state.partition(p.partition);
              int blocks = std::min(p.blocks, p.cap_blocks);
              int64_t mem = std::min(p.mem, p.cap_mem);
              int64_t need_mem = shape.vram_mib >= 0 ? shape.vram_mib : state.default_mem(ps, shape.blocks);
              bool exclusive = ps.exclusive && p.jobs > 0;
              if (!exclusive && blocks >= shape.blocks && mem >= need_mem &&
                  (!fit || blocks < std::min(fit->blocks, fit->cap_blocks))) {
                fit = &p;
              }
            }
            if (fit) {
              const PartitionState& ps = state.partition(fit->partition);
              found.uses.push_back({fit->partition, static_cast<int16_t>(shape.blocks),
                                    shape.vram_mib >= 0 ? shape.vram_mib : state.default_mem(ps, shape.blocks)});
            }
          } else {
            // A whole GPU or a MIG instance: nothing else may be on it.
            int needed = shape.kind == model::SliceKind::kWhole ? shape.gpu_count : 1;
            for (const auto& p : at.parts) {
              const PartitionState& ps = state.partition(p.partition);
              if (p.jobs == 0 && std::min(p.blocks, p.cap_blocks) >= ps.total_blocks &&
                  std::min(p.mem, p.cap_mem) >= ps.total_mem && static_cast<int>(found.uses.size()) < needed) {
                found.uses.push_back({p.partition, ps.total_blocks, ps.total_mem});
              }
            }
            if (static_cast<int>(found.uses.size()) < needed) found.uses.clear();
          }
        }
        if (fits || !found.uses.empty()) {
          best = std::move(found);
          break;
        }
      }
      if (next_release == releases.size()) break;
      // Advance to the next end time, releasing every job that ends then.
      t = state.allocation(releases[next_release]).end;
      while (next_release < releases.size() && state.allocation(releases[next_release]).end == t) {
        const Allocation& a = state.allocation(releases[next_release++]);
        base.cpu += a.cpu;
        base.mem += a.mem;
        for (const PartUse& use : state.parts(a)) {
          if (auto* p = base.find(use.partition)) {
            p->blocks += use.blocks;
            p->mem += use.mem;
            p->jobs -= 1;
          }
        }
      }
    }
  }
  return best;
}

void Calendar::reserve(const ClusterState& state, JobIndex job, const EarliestStart& start, Time end) {
  // Slack is what stays free at the start once the job has its share. Computed from the same view
  // earliest_start used: free capacity at the start minus holds running then, capped by holds ahead.
  Hold h{job, start.node, start.start, end, start.cpu, start.mem, 0, 0, {}};
  const NodeState& node = state.node(start.node);
  int64_t cpu = node.cpu_free, mem = node.mem_free;
  std::vector<HoldPart> parts;
  for (const PartUse& use : start.uses) {
    const PartitionState& ps = state.partition(use.partition);
    parts.push_back({use.partition, use.blocks, use.mem, ps.free_blocks, ps.free_mem});
  }
  for (uint32_t a : state.node_allocations(start.node)) {
    const Allocation& alloc = state.allocation(a);
    if (alloc.end > start.start) continue;
    cpu += alloc.cpu;
    mem += alloc.mem;
    for (const PartUse& use : state.parts(alloc)) {
      for (HoldPart& p : parts) {
        if (p.partition == use.partition) {
          p.slack_blocks += use.blocks;
          p.slack_mem += use.mem;
        }
      }
    }
  }
  for (uint32_t id : by_node_[start.node]) {
    const Hold& other = holds_[id];
    if (other.start <= start.start && start.start < other.end) {
      cpu -= other.need_cpu;
      mem -= other.need_mem;
      for (const HoldPart& op : other.parts) {
        for (HoldPart& p : parts) {
          if (p.partition == op.partition) {
            p.slack_blocks -= op.need_blocks;
            p.slack_mem -= op.need_mem;
          }
        }
      }
    }
  }
  h.slack_cpu = cpu - start.cpu;
  h.slack_mem = mem - start.mem;
  for (HoldPart& p : parts) {
    p.slack_blocks -= p.need_blocks;
    p.slack_mem -= p.need_mem;
  }
  h.parts = std::move(parts);
  // Holds further ahead that this job would still be running into give up what it takes.
  charge(start.node, start.start, end, start.cpu, start.mem, start.uses);
  by_node_[start.node].push_back(static_cast<uint32_t>(holds_.size()));
  holds_.push_back(std::move(h));
}

}  // namespace cnlab::sched
