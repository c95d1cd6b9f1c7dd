#include "sched/cluster_state.h"

#include <algorithm>

namespace cnlab::sched {

ClusterState::ClusterState(const std::vector<model::Node>& nodes) {
  nodes_.reserve(nodes.size());
  node_allocations_.resize(nodes.size());
  node_allocation_ends_.resize(nodes.size());
  node_by_name_.reserve(nodes.size());
  node_model_begin_.reserve(nodes.size() + 1);
  for (uint32_t n = 0; n < nodes.size(); ++n) {
    const model::Node& src = nodes[n];
    NodeState node;
    node.cpu_total = node.cpu_free = src.cpu_milli;
    node.mem_total = node.mem_free = src.memory_mib;
    node.schedulable = src.schedulable();
    node.traits = traits_of(src);
    node.gpu_begin = static_cast<uint32_t>(gpus_.size());
    nodes_.push_back(node);
    node_by_name_.emplace(src.meta.name, n);

    std::array<int, model::kMaxModels> per_model{};
    for (const model::Gpu& g : src.gpus) {
      uint32_t gi = static_cast<uint32_t>(gpus_.size());
      gpus_.push_back({n, g.index, g.model, g.healthy, g.memory_mib, kNone, kNone});
      ++per_model[g.model];
      ++total_gpus_[g.model];
      auto layout = g.mig_enabled ? model::MigLayout::create(g.model, g.mig_instances) : model::MigLayout(g.model);
      if (!layout) {
        // Decoding refuses such layouts; a snapshot built in code may still hold one. The GPU is
        // kept out of placement rather than trusted or fatal.
        warnings_.push_back("node \"" + src.meta.name + "\" GPU " + std::to_string(g.index) +
                            ": MIG layout refused, GPU not used: " + layout.error().to_string());
        gpus_[gi].healthy = false;
        gpus_[gi].whole = add_partition(gi, model::kBlocksPerGpu, g.memory_mib, -1, -1);
        partitions_[gpus_[gi].whole].exclusive = true;
      } else if (g.mig_enabled) {
        gpus_[gi].mig = static_cast<uint32_t>(mig_gpus_.size());
        mig_gpus_.push_back({*layout, {}});
        if (node.schedulable && gpus_[gi].healthy) mig_gpus_by_model_[g.model].push_back(gi);
        for (const auto& instance : g.mig_instances) {
          const auto& profile = model::gpu_model(g.model).mig_profiles[instance.profile];
          uint32_t p = add_partition(gi, profile.blocks(), profile.memory_mib, instance.start, instance.profile);
          mig_gpus_[gpus_[gi].mig].partitions.push_back(p);
        }
      } else {
        gpus_[gi].whole = add_partition(gi, model::kBlocksPerGpu, g.memory_mib, -1, -1);
      }
      nodes_[n].blocks_total += model::kBlocksPerGpu;
      if (gpus_[gi].healthy) nodes_[n].models |= model::model_bit(g.model);
    }
    nodes_[n].gpu_end = static_cast<uint32_t>(gpus_.size());

    node_model_begin_.push_back(static_cast<uint32_t>(node_models_.size()));
    for (int m = 0; m < model::kMaxModels; ++m) {
      if (per_model[m] == 0) continue;
      auto id = static_cast<model::ModelId>(m);
      max_gpus_per_node_[m] = std::max(max_gpus_per_node_[m], per_model[m]);
      node_models_.push_back({n, id, 0});
    }
  }
  node_model_begin_.push_back(static_cast<uint32_t>(node_models_.size()));

  // Index what is offered: block buckets for every partition, whole counts per node and model.
  for (uint32_t p = 0; p < partitions_.size(); ++p) {
    if (offered(p)) index_partition(p);
  }
  for (uint32_t e = 0; e < node_models_.size(); ++e) {
    NodeModel& entry = node_models_[e];
    if (!nodes_[entry.node].schedulable) continue;
    int free = 0;
    for (uint32_t g = nodes_[entry.node].gpu_begin; g < nodes_[entry.node].gpu_end; ++g) {
      if (gpus_[g].model == entry.model && gpus_[g].whole != kNone && whole_free_gpu(gpus_[g].whole)) ++free;
    }
    entry.free = 0;
    adjust_whole(entry.node, entry.model, free);
  }
}

uint32_t ClusterState::add_partition(uint32_t gpu, int blocks, int64_t mem, int mig_start, int mig_profile) {
  PartitionState p;
  p.node = gpus_[gpu].node;
  p.gpu = gpu;
  p.total_blocks = p.free_blocks = static_cast<int16_t>(blocks);
  p.total_mem = p.free_mem = mem;
  p.mig_start = static_cast<int8_t>(mig_start);
  p.mig_profile = static_cast<int8_t>(mig_profile);
  p.model = gpus_[gpu].model;
  partitions_.push_back(p);
  return static_cast<uint32_t>(partitions_.size() - 1);
}

bool ClusterState::offered(uint32_t p) const {
  const PartitionState& part = partitions_[p];
  return nodes_[part.node].schedulable && gpus_[part.gpu].healthy;
}

uint32_t ClusterState::find_node(std::string_view name) const {
  auto it = node_by_name_.find(name);
  return it == node_by_name_.end() ? kNone : it->second;
}

uint32_t ClusterState::find_partition(uint32_t node, int gpu_index, int mig_start) const {
  const NodeState& n = nodes_[node];
  if (gpu_index < 0 || static_cast<uint32_t>(gpu_index) >= n.gpu_end - n.gpu_begin) return kNone;
  const GpuState& g = gpus_[n.gpu_begin + gpu_index];
  if (mig_start < 0) return g.whole;
  if (g.mig == kNone) return kNone;
  for (uint32_t p : mig_gpus_[g.mig].partitions) {
    if (partitions_[p].mig_start == mig_start) return p;
  }
  return kNone;
}

bool ClusterState::whole_free_gpu(uint32_t p) const {
  const PartitionState& part = partitions_[p];
  return part.mig_start < 0 && part.jobs == 0 && gpus_[part.gpu].healthy;
}

void ClusterState::index_partition(uint32_t p) {
  PartitionState& part = partitions_[p];
  if (part.exclusive || part.free_blocks <= 0) return;
  buckets_[part.model][part.free_blocks].insert(p);
  part.indexed_at = part.free_blocks;
}

void ClusterState::unindex_partition(uint32_t p) {
  PartitionState& part = partitions_[p];
  if (part.indexed_at < 0) return;
  buckets_[part.model][part.indexed_at].erase(p);
  part.indexed_at = -1;
}

uint32_t ClusterState::node_model(uint32_t node, model::ModelId model) const {
  for (uint32_t e = node_model_begin_[node]; e < node_model_begin_[node + 1]; ++e) {
    if (node_models_[e].model == model) return e;
  }
  return kNone;
}

void ClusterState::adjust_whole(uint32_t node, model::ModelId model, int delta) {
  if (!nodes_[node].schedulable) return;
  uint32_t e = node_model(node, model);
  CNLAB_CHECK(e != kNone);
  NodeModel& entry = node_models_[e];
  auto bucket_of = [](int free) { return std::min(free, kWholeBuckets - 1); };
  if (entry.free > 0) whole_buckets_[model][bucket_of(entry.free)].erase(e);
  entry.free += delta;
  CNLAB_CHECK(entry.free >= 0);
  if (entry.free > 0) whole_buckets_[model][bucket_of(entry.free)].insert(e);
}

int ClusterState::whole_free(uint32_t node, model::ModelId model) const {
  uint32_t e = node_model(node, model);
  return e == kNone ? 0 : node_models_[e].free;
}

int ClusterState::most_whole_free(model::ModelId model) const {
  for (int count = kWholeBuckets - 1; count > 0; --count) {
    const IndexSet& bucket = whole_buckets_[model][count];
    if (bucket.empty()) continue;
    if (count < kWholeBuckets - 1) return count;
    int most = 0;
    for (uint32_t e = bucket.first(); e != IndexSet::kEnd; e = bucket.next(e + 1)) {
      most = std::max(most, node_models_[e].free);
    }
    return most;
  }
  return 0;
}

int ClusterState::largest_free_blocks(model::ModelId model) const {
  for (int b = model::kBlocksPerGpu; b > 0; --b) {
    if (!buckets_[model][b].empty()) return b;
  }
  return 0;
}

bool ClusterState::apply(const Allocation& a, int sign, bool exclusive_mig) {
  NodeState& n = nodes_[a.node];
  ++n.version;
  bool over = sign < 0 && (a.cpu > n.cpu_free || a.mem > n.mem_free);
  n.cpu_free += sign * a.cpu;
  n.mem_free += sign * a.mem;
  n.allocations += sign < 0 ? 1 : -1;
  for (const PartUse& use : parts(a)) {
    PartitionState& part = partitions_[use.partition];
    bool offer = offered(use.partition);
    bool was_whole_free = whole_free_gpu(use.partition);
    if (sign < 0) {
      over = over || use.blocks > part.free_blocks || use.mem > part.free_mem || part.exclusive ||
             (exclusive_mig && part.jobs > 0);
    }
    unindex_partition(use.partition);
    part.free_blocks = static_cast<int16_t>(part.free_blocks + sign * use.blocks);
    part.free_mem += sign * use.mem;
    part.jobs = static_cast<uint16_t>(part.jobs - sign);
    if (sign < 0) part.exclusive = part.exclusive || exclusive_mig;
    else if (part.jobs == 0) part.exclusive = false;
    n.blocks_used -= sign * use.blocks;
    if (offer) index_partition(use.partition);
    bool is_whole_free = whole_free_gpu(use.partition);
    if (offer && was_whole_free != is_whole_free) adjust_whole(a.node, part.model, is_whole_free ? +1 : -1);
  }
  return over;
}

uint32_t ClusterState::allocate(JobIndex job, uint32_t node, int64_t cpu, int64_t mem, std::span<const PartUse> uses,
                                bool exclusive_mig, Time start, Time end, bool* overcommitted) {
  for (const PartUse& use : uses) CNLAB_CHECK(partitions_[use.partition].node == node);
  Allocation a{job, node, start, end, cpu, mem, static_cast<uint32_t>(parts_.size()),
               static_cast<uint32_t>(uses.size()), true, exclusive_mig};
  parts_.insert(parts_.end(), uses.begin(), uses.end());
  bool over = apply(a, -1, exclusive_mig);
  if (overcommitted) *overcommitted = over;
  node_allocations_[node].push_back(static_cast<uint32_t>(allocations_.size()));
  node_allocation_ends_[node].push_back(end);
  allocations_.push_back(a);
  return static_cast<uint32_t>(allocations_.size() - 1);
}

void ClusterState::release(uint32_t allocation) {
  Allocation& a = allocations_[allocation];
  if (!a.live) return;
  a.live = false;
  apply(a, +1, false);
  auto& list = node_allocations_[a.node];
  auto at = std::find(list.begin(), list.end(), allocation);
  node_allocation_ends_[a.node].erase(node_allocation_ends_[a.node].begin() + (at - list.begin()));
  list.erase(at);
}

void ClusterState::restore(uint32_t allocation) {
  Allocation& a = allocations_[allocation];
  if (a.live) return;
  a.live = true;
  apply(a, -1, a.exclusive_mig);
  node_allocations_[a.node].push_back(allocation);
  node_allocation_ends_[a.node].push_back(a.end);
}

void ClusterState::set_offered(uint32_t node, bool offer) {
  NodeState& n = nodes_[node];
  if (n.schedulable == offer) return;
  ++n.version;
  std::vector<uint32_t> parts;
  for (uint32_t g = n.gpu_begin; g < n.gpu_end; ++g) {
    if (gpus_[g].whole != kNone) parts.push_back(gpus_[g].whole);
    if (gpus_[g].mig != kNone) parts.insert(parts.end(), mig_gpus_[gpus_[g].mig].partitions.begin(),
                                            mig_gpus_[gpus_[g].mig].partitions.end());
  }
  if (!offer) {
    for (uint32_t p : parts) unindex_partition(p);
    for (uint32_t e = node_model_begin_[node]; e < node_model_begin_[node + 1]; ++e) {
      adjust_whole(node, node_models_[e].model, -node_models_[e].free);
    }
    n.schedulable = false;
    return;
  }
  n.schedulable = true;
  for (uint32_t p : parts) {
    if (offered(p)) index_partition(p);
    if (whole_free_gpu(p)) adjust_whole(node, partitions_[p].model, +1);
  }
}

void ClusterState::enable_mig(uint32_t gpu) {
  GpuState& g = gpus_[gpu];
  CNLAB_CHECK(g.whole != kNone && partitions_[g.whole].jobs == 0);
  ++nodes_[g.node].version;
  uint32_t old = g.whole;
  unindex_partition(old);
  if (offered(old)) adjust_whole(g.node, g.model, -1);
  // The old partition stays in the vector (indices are stable) but is no longer reachable.
  partitions_[old].free_blocks = 0;
  partitions_[old].exclusive = true;
  g.whole = kNone;
  g.mig = static_cast<uint32_t>(mig_gpus_.size());
  mig_gpus_.push_back({model::MigLayout(g.model), {}});
  if (nodes_[g.node].schedulable && g.healthy) mig_gpus_by_model_[g.model].push_back(gpu);
}

uint32_t ClusterState::create_instance(uint32_t gpu, int profile, int start) {
  GpuState& g = gpus_[gpu];
  CNLAB_CHECK(g.mig != kNone);
  ++nodes_[g.node].version;
  MigGpu& mig = mig_gpus_[g.mig];
  CNLAB_CHECK(mig.layout.add(profile, start).has_value());
  const auto& p = model::gpu_model(g.model).mig_profiles[profile];
  uint32_t part = add_partition(gpu, p.blocks(), p.memory_mib, start, profile);
  mig_gpus_[g.mig].partitions.push_back(part);
  if (offered(part)) index_partition(part);
  return part;
}

void ClusterState::remove_instance(uint32_t partition) {
  PartitionState& part = partitions_[partition];
  GpuState& g = gpus_[part.gpu];
  CNLAB_CHECK(g.mig != kNone && part.mig_start >= 0 && part.empty());
  ++nodes_[g.node].version;
  MigGpu& mig = mig_gpus_[g.mig];
  CNLAB_CHECK(mig.layout.remove(part.mig_start));
  std::erase(mig.partitions, partition);
  unindex_partition(partition);
  part.free_blocks = 0;
  part.exclusive = true;
}

}  // namespace cnlab::sched
