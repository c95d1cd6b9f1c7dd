// The occupancy of the cluster during one cycle: nodes, GPUs, partitions (a whole GPU or one MIG
// instance: the unit 1% blocks are carved from) and what holds them, with the indexes that make a
// placement search cost O(candidates) instead of O(cluster). Private to src/sched.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/time.h"
#include "model/model.h"
#include "sched/decision.h"
#include "sched/index_set.h"
#include "sched/job_shape.h"
#include "sched/node_traits.h"

namespace cnlab::sched {

inline constexpr uint32_t kNone = UINT32_MAX;
inline constexpr Time kNever = Time::max();

struct NodeState {
  int64_t cpu_total = 0, cpu_free = 0;
  int64_t mem_total = 0, mem_free = 0;
  uint32_t gpu_begin = 0, gpu_end = 0;  // into gpus()
  uint32_t allocations = 0;             // live allocations on the node
  int32_t blocks_total = 0, blocks_used = 0;
  model::ModelMask models = 0;  // models of its healthy GPUs
  uint32_t version = 0;         // grows with every change, for caches of what derives from the node
  bool schedulable = false;
  NodeTraits traits = 0;
};

// Whether `node` could ever take `shape`, empty: offered, big enough, of a model it accepts, with
// the traits it needs. The first filter of every search that ranks nodes.
inline bool could_host(const NodeState& node, const JobShape& shape) {
  const model::ModelMask wanted = shape.kind == model::SliceKind::kMig ? model::model_bit(shape.mig_model()) : shape.models;
  return node.schedulable && node.cpu_total >= shape.cpu_milli && node.mem_total >= shape.memory_mib &&
         (wanted == 0 || (node.models & wanted) != 0) && has_traits(node.traits, shape.node_traits);
}

struct PartitionState {
  uint32_t node = 0, gpu = 0;
  int16_t total_blocks = 0, free_blocks = 0;
  int8_t mig_start = -1;    // -1: the whole GPU
  int8_t mig_profile = -1;
  model::ModelId model = 0;
  bool exclusive = false;  // held whole by a MIG request; no blocks may be carved from it
  int16_t indexed_at = -1;  // the free-blocks bucket it is listed in; -1 when in none
  uint16_t jobs = 0;
  int64_t total_mem = 0, free_mem = 0;

  bool empty() const { return jobs == 0; }
};

struct GpuState {
  uint32_t node = 0;
  int index = 0;
  model::ModelId model = 0;
  bool healthy = true;
  int64_t memory_mib = 0;
  uint32_t whole = kNone;  // its partition when not in MIG mode
  uint32_t mig = kNone;    // into mig_gpu() when in MIG mode
};

struct MigGpu {
  model::MigLayout layout;
  std::vector<uint32_t> partitions;  // one per instance
};

// One part of an allocation: blocks and VRAM on one partition.
struct PartUse {
  uint32_t partition = 0;
  int16_t blocks = 0;
  int64_t mem = 0;
};

// What one job holds on one node (a multi-node gang has one allocation per node).
struct Allocation {
  JobIndex job = 0;
  uint32_t node = 0;
  Time start{};
  Time end = kNever;  // expected end; kNever when the job has no estimate
  int64_t cpu = 0, mem = 0;
  uint32_t parts_begin = 0, parts_count = 0;  // into parts()
  bool live = true;
  bool exclusive_mig = false;  // a MIG request holding its instance whole
};

class ClusterState {
 public:
  // Builds the state of `nodes` with nothing allocated. Unhealthy GPUs and unschedulable nodes are
  // kept (running work may sit on them) but never offered to new work.
  explicit ClusterState(const std::vector<model::Node>& nodes);

  // What was wrong with the nodes and worked around (a refused MIG layout keeps its GPU unused).
  const std::vector<std::string>& warnings() const { return warnings_; }

  uint32_t node_count() const { return static_cast<uint32_t>(nodes_.size()); }
  const NodeState& node(uint32_t n) const { return nodes_[n]; }
  std::span<const GpuState> gpus() const { return gpus_; }
  const GpuState& gpu(uint32_t g) const { return gpus_[g]; }
  const PartitionState& partition(uint32_t p) const { return partitions_[p]; }
  const MigGpu& mig_gpu(uint32_t m) const { return mig_gpus_[m]; }
  const Allocation& allocation(uint32_t a) const { return allocations_[a]; }
  uint32_t allocation_count() const { return static_cast<uint32_t>(allocations_.size()); }
  std::span<const PartUse> parts(const Allocation& a) const { return {parts_.data() + a.parts_begin, a.parts_count}; }
  // The GPU blocks `a` holds, over all its partitions.
  int held_blocks(const Allocation& a) const {
    int blocks = 0;
    for (const PartUse& use : parts(a)) blocks += use.blocks;
    return blocks;
  }
  const std::vector<uint32_t>& node_allocations(uint32_t n) const { return node_allocations_[n]; }
  // The expected ends of node_allocations(n), in the same order: scanned by every reservation, so
  // kept apart from the allocation records to be read contiguously.
  const std::vector<Time>& node_allocation_ends(uint32_t n) const { return node_allocation_ends_[n]; }

  uint32_t find_node(std::string_view name) const;  // kNone when absent
  // The partition for (node, gpu index, mig_start); kNone when there is no such GPU or instance.
  uint32_t find_partition(uint32_t node, int gpu_index, int mig_start) const;

  // VRAM a block grant of `blocks` takes on `p` unless the request names its own quota.
  int64_t default_mem(const PartitionState& p, int blocks) const {
    return p.total_blocks == 0 ? 0 : p.total_mem * blocks / p.total_blocks;
  }
  // Whether a new grant may use this partition at all (schedulable node, healthy GPU).
  bool offered(uint32_t p) const;

  // Records that `job` holds `uses` (and cpu/mem) on `node`. Over-commitment is applied (running
  // work is real) but reported through the return value so the caller can warn.
  uint32_t allocate(JobIndex job, uint32_t node, int64_t cpu, int64_t mem, std::span<const PartUse> uses,
                    bool exclusive_mig, Time start, Time end, bool* overcommitted = nullptr);
  void release(uint32_t allocation);
  // Re-applies a released allocation under its old id (to undo a tentative release).
  void restore(uint32_t allocation);

  // Withholds a schedulable node from every search (false) and offers it again (true), keeping
  // what runs there: where running jobs move from must not be where they move to.
  void set_offered(uint32_t node, bool offered);

  // MIG changes decided during the cycle. enable_mig requires an empty whole GPU.
  void enable_mig(uint32_t gpu);
  uint32_t create_instance(uint32_t gpu, int profile, int start);
  // Undoes create_instance of an instance nothing holds (a move's target, tried and given up). The
  // partition's index stays taken but unreachable.
  void remove_instance(uint32_t partition);

  // Free-blocks buckets: partitions offered to block requests, per model, by free blocks.
  const IndexSet& bucket(model::ModelId model, int free_blocks) const { return buckets_[model][free_blocks]; }
  int largest_free_blocks(model::ModelId model) const;

  // Whole-GPU index: per (node, model) entry, how many whole GPUs are completely free, bucketed by
  // count. Entries are numbered in node order.
  int whole_free(uint32_t node, model::ModelId model) const;
  const IndexSet& whole_bucket(model::ModelId model, int count) const { return whole_buckets_[model][count]; }
  uint32_t whole_entry_node(uint32_t entry) const { return node_models_[entry].node; }
  int most_whole_free(model::ModelId model) const;
  int max_gpus_per_node(model::ModelId model) const { return max_gpus_per_node_[model]; }
  int total_gpus(model::ModelId model) const { return total_gpus_[model]; }
  const std::vector<uint32_t>& mig_gpus_of(model::ModelId model) const { return mig_gpus_by_model_[model]; }

  static constexpr int kWholeBuckets = 65;  // counts above 64 share the last bucket

 private:
  struct NodeModel {
    uint32_t node = 0;
    model::ModelId model = 0;
    int free = 0;
  };

  // Takes (sign = -1) or gives back (sign = +1) what an allocation holds; returns whether taking
  // over-committed anything.
  bool apply(const Allocation& a, int sign, bool exclusive_mig);
  uint32_t add_partition(uint32_t gpu, int blocks, int64_t mem, int mig_start, int mig_profile);
  void index_partition(uint32_t p);
  void unindex_partition(uint32_t p);
  bool whole_free_gpu(uint32_t p) const;
  void adjust_whole(uint32_t node, model::ModelId model, int delta);
  uint32_t node_model(uint32_t node, model::ModelId model) const;

  std::vector<std::string> warnings_;
  std::vector<NodeState> nodes_;
  std::vector<GpuState> gpus_;
  std::vector<PartitionState> partitions_;
  std::vector<MigGpu> mig_gpus_;
  std::vector<Allocation> allocations_;
  std::vector<PartUse> parts_;
  std::vector<std::vector<uint32_t>> node_allocations_;
  std::vector<std::vector<Time>> node_allocation_ends_;
  std::vector<NodeModel> node_models_;
  std::vector<uint32_t> node_model_begin_;  // node -> first NodeModel entry; entries of a node are contiguous
  std::unordered_map<std::string_view, uint32_t> node_by_name_;
  std::array<std::array<IndexSet, model::kBlocksPerGpu + 1>, model::kMaxModels> buckets_;
  std::array<std::array<IndexSet, kWholeBuckets>, model::kMaxModels> whole_buckets_;
  std::array<int, model::kMaxModels> max_gpus_per_node_{};
  std::array<int, model::kMaxModels> total_gpus_{};
  std::array<std::vector<uint32_t>, model::kMaxModels> mig_gpus_by_model_;
};

}  // namespace cnlab::sched
