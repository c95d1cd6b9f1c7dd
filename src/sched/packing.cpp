#include "sched/packing.h"

#include <algorithm>
#include <limits>

namespace cnlab::sched {
namespace {

constexpr int32_t kUnbounded = std::numeric_limits<int32_t>::max();

// floor(a / b) for 0 <= a, b <= 100: the scorer's inner loop divides block counts all the time.
struct SmallQuotients {
  uint8_t q[model::kBlocksPerGpu + 1][model::kBlocksPerGpu + 1];
  constexpr SmallQuotients() : q() {
    for (int a = 0; a <= model::kBlocksPerGpu; ++a) {
      for (int b = 1; b <= model::kBlocksPerGpu; ++b) q[a][b] = static_cast<uint8_t>(a / b);
    }
  }
};
constexpr SmallQuotients kQuotients;

// floor(cpu_free / cpu) through a reciprocal (exact after the correction): no 64-bit division.
int32_t host_slots(int64_t cpu, double inverse, int64_t cpu_free) {
  if (cpu <= 0) return kUnbounded;
  if (cpu_free <= 0) return 0;
  auto q = static_cast<int64_t>(static_cast<double>(cpu_free) * inverse);
  while (q * cpu > cpu_free) --q;
  while ((q + 1) * cpu <= cpu_free) ++q;
  return static_cast<int32_t>(std::min<int64_t>(q, kUnbounded));
}

// floor(mem_free / memory) through the reciprocal of a shape's mean memory; unbounded without one.
int32_t memory_slots(double inverse_memory, int64_t mem_free) {
  if (inverse_memory <= 0) return kUnbounded;
  if (mem_free <= 0) return 0;
  return static_cast<int32_t>(std::min<double>(static_cast<double>(mem_free) * inverse_memory, kUnbounded));
}

}  // namespace

int32_t PackingScorer::partition_slots(const PartitionState& p, const JobShape& m, int free_blocks, int64_t free_mem) {
  if (!model::mask_allows(m.models, p.model)) return 0;
  switch (m.kind) {
    case model::SliceKind::kBlocks: {
      if (p.exclusive || free_blocks <= 0) return 0;
      int32_t slots = kQuotients.q[std::min(free_blocks, model::kBlocksPerGpu)][m.blocks];
      // A block's default VRAM is its share of the partition, so only an own quota can bind first.
      if (m.vram_mib > 0)
        slots = static_cast<int32_t>(std::min<int64_t>(slots, std::max<int64_t>(free_mem, 0) / m.vram_mib));
      return slots;
    }
    case model::SliceKind::kWhole: return p.mig_start < 0 && free_blocks == p.total_blocks ? 1 : 0;
    case model::SliceKind::kMig:
      return p.mig_profile == m.mig_profile && !p.exclusive && free_blocks == p.total_blocks ? 1 : 0;
    case model::SliceKind::kNone: return 0;
  }
  return 0;
}

const std::vector<int32_t>& PackingScorer::gpu_slots(const ClusterState& state, uint32_t node) const {
  if (cache_.size() < state.node_count()) cache_.resize(state.node_count());
  NodeSlots& c = cache_[node];
  const NodeState& n = state.node(node);
  if (c.node_version == n.version && c.profile_version == profile_->version()) return c.gpu_slots;
  const auto& typical = profile_->typical();
  c.gpu_slots.assign(typical.size(), 0);
  for (uint32_t g = n.gpu_begin; g < n.gpu_end; ++g) {
    const GpuState& gpu = state.gpu(g);
    if (!gpu.healthy) continue;
    auto count = [&](uint32_t p) {
      const PartitionState& part = state.partition(p);
      for (size_t m = 0; m < typical.size(); ++m) {
        c.gpu_slots[m] += partition_slots(part, typical[m].shape, part.free_blocks, part.free_mem);
      }
    };
    if (gpu.whole != kNone)
      count(gpu.whole);
    else
      for (uint32_t p : state.mig_gpu(gpu.mig).partitions) count(p);
  }
  c.node_version = n.version;
  c.profile_version = profile_->version();
  return c.gpu_slots;
}

const std::vector<int32_t>& PackingScorer::host_slots_now(const NodeState& n, uint32_t node) const {
  NodeSlots& c = cache_[node];
  if (c.host_node_version == n.version && c.host_profile_jobs == profile_->jobs()) return c.host_slots;
  const auto& typical = profile_->typical();
  c.host_slots.resize(typical.size());
  for (size_t m = 0; m < typical.size(); ++m) {
    c.host_slots[m] = std::min(host_slots(typical[m].shape.cpu_milli, inverse_cpu_[m], n.cpu_free),
                               memory_slots(typical[m].inverse_memory, n.mem_free));
  }
  c.host_node_version = n.version;
  c.host_profile_jobs = profile_->jobs();
  return c.host_slots;
}

// Weights of the cost's terms (blocks of capacity). Stranding counts double: a GPU cut off from CPU
// is lost to every request shape, not to one. The tie-breakers stay below one block in total.
constexpr double kStrandWeight = 2.0;
constexpr double kTightFitWeight = 1e-3;
constexpr double kIdleNodePenalty = 0.5;

void PackingScorer::refresh_shape_constants(const ClusterState& state) const {
  int64_t all_gpus = 0;
  for (int id = 0; id < model::kMaxModels; ++id) all_gpus += state.total_gpus(static_cast<model::ModelId>(id));
  inverse_cpu_.clear();
  scarcity_.clear();
  for (const auto& t : profile_->typical()) {
    inverse_cpu_.push_back(t.shape.cpu_milli > 0 ? 1.0 / t.shape.cpu_milli : 0.0);
    int64_t eligible = 0;
    for (int id = 0; id < model::kMaxModels; ++id) {
      auto m = static_cast<model::ModelId>(id);
      if (model::mask_allows(t.shape.models, m)) eligible += state.total_gpus(m);
    }
    scarcity_.push_back(eligible > 0 ? static_cast<double>(all_gpus) / static_cast<double>(eligible) : 1.0);
  }
  shape_constants_version_ = profile_->version();
}

double PackingScorer::cost(const ClusterState& state, const JobShape& shape, const CandidateView& c) const {
  const NodeState& node = state.node(c.node);
  double cost = 0;
  if (profile_ && !profile_->typical().empty()) {
    const auto& typical = profile_->typical();
    if (shape_constants_version_ != profile_->version()) refresh_shape_constants(state);
    const auto& slots = gpu_slots(state, c.node);
    const auto& host_now = host_slots_now(node, c.node);
    int64_t cpu_after = node.cpu_free - c.cpu;
    int64_t mem_after = node.mem_free - c.mem;
    bool exclusive_after = shape.kind == model::SliceKind::kMig;
    for (size_t m = 0; m < typical.size(); ++m) {
      const JobShape& t = typical[m].shape;
      if (t.kind == model::SliceKind::kNone || (t.models != 0 && (t.models & node.models) == 0)) continue;
      int32_t gpu_before = slots[m], gpu_after = gpu_before;
      for (const PartUse& use : c.uses) {
        const PartitionState& p = state.partition(use.partition);
        gpu_after -= partition_slots(p, t, p.free_blocks, p.free_mem);
        if (!exclusive_after) gpu_after += partition_slots(p, t, p.free_blocks - use.blocks, p.free_mem - use.mem);
      }
      if (c.mig_change == 2 && t.kind == model::SliceKind::kWhole) gpu_after -= 1;
      int per_gpu_count = t.kind == model::SliceKind::kWhole ? t.gpu_count : 1;
      int32_t host_before = host_now[m];
      int32_t host_after = c.cpu == 0 && c.mem == 0 ? host_before
                                                    : std::min(host_slots(t.cpu_milli, inverse_cpu_[m], cpu_after),
                                                               memory_slots(typical[m].inverse_memory, mem_after));
      int32_t before = std::min(gpu_before / per_gpu_count, host_before);
      int32_t after = std::min(std::max(gpu_after, 0) / per_gpu_count, host_after);
      if (before != after) {
        cost += typical[m].weight * scarcity_[m] * static_cast<double>(before - after) * t.total_blocks();
      }
    }
    // GPU capacity the node's CPU or memory cannot feed at the arrived jobs' CPU and memory per block.
    if (double cpu_per_block = profile_->cpu_per_block(); cpu_per_block > 0) {
      const double blocks_per_cpu = 1.0 / cpu_per_block;
      const double mem_per_block = profile_->memory_per_block();
      const double blocks_per_mem = mem_per_block > 0 ? 1.0 / mem_per_block : 0.0;
      auto fed = [&](int64_t cpu, int64_t mem) {
        double blocks = static_cast<double>(cpu) * blocks_per_cpu;
        if (blocks_per_mem > 0) blocks = std::min(blocks, static_cast<double>(mem) * blocks_per_mem);
        return blocks;
      };
      int blocks_free = node.blocks_total - node.blocks_used;
      int blocks_after = blocks_free;
      for (const PartUse& use : c.uses) blocks_after -= use.blocks;
      double stranded_before = std::max(0.0, blocks_free - fed(node.cpu_free, node.mem_free));
      double stranded_after = std::max(0.0, blocks_after - fed(cpu_after, mem_after));
      cost += kStrandWeight * (stranded_after - stranded_before);
    }
  }
  // Tie-breakers, small against any difference in usable capacity: tightest fit, then busy nodes.
  double leftover = 0;
  for (const PartUse& use : c.uses) leftover += state.partition(use.partition).free_blocks - use.blocks;
  cost += kTightFitWeight * (leftover + 100.0 * c.whole_gpus_opened + 50.0 * c.mig_change);
  if (node.allocations == 0) cost += kIdleNodePenalty;
  return cost;
}

}  // namespace cnlab::sched
