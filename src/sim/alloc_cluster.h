// The allocation experiment's cluster: every node's free CPU, memory and per-GPU free milli, held
// by the engine in flat arrays and shown to policies read-only.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/common.h"
#include "sim/openb_trace.h"

namespace cnlab::sim {

using NodeIndex = uint32_t;
// One bit per GPU model of the cluster (ids 0..kMaxModels-1).
using ModelMask = uint64_t;
inline constexpr int kMaxModels = 63;
inline constexpr ModelMask kAnyModel = ~ModelMask{0};
// Set alone for a spec naming only models the cluster lacks: no node matches it, and it is still
// distinguishable from "any".
inline constexpr ModelMask kNoClusterModel = ModelMask{1} << 63;

enum class PodKind : uint8_t {
  kCpuOnly,   // num_gpu == 0
  kSharing,   // num_gpu == 1, gpu_milli < 1000
  kWholeGpu,  // gpu_milli == 1000, num_gpu >= 1
};

// One arriving pod as the engine and the policies see it.
struct Pod {
  int32_t cpu_milli = 0;
  int32_t memory_mib = 0;
  int32_t num_gpu = 0;
  int32_t gpu_milli = 0;                 // per GPU
  ModelMask allowed_models = kAnyModel;  // from gpu_spec; kAnyModel when it is empty

  PodKind kind() const {
    if (num_gpu == 0) return PodKind::kCpuOnly;
    return gpu_milli < kGpuMilli ? PodKind::kSharing : PodKind::kWholeGpu;
  }
  int64_t gpu_request() const { return int64_t{num_gpu} * gpu_milli; }
};

// Where a pod goes: a node and, as a bit mask over the node's GPU indexes, the GPUs it takes
// (one bit for a sharing pod, num_gpu bits of fully free GPUs for a whole-GPU pod, none for a
// CPU-only pod).
struct Choice {
  NodeIndex node = 0;
  uint32_t gpus = 0;
};

class AllocCluster {
 public:
  // Fails when a node has more than kMaxGpusPerNode GPUs or the cluster has more than kMaxModels
  // GPU models. All nodes start empty with rank i for node i.
  static Result<AllocCluster> build(std::span<const OpenbNode> nodes);

  size_t node_count() const { return names_.size(); }
  std::string_view node_name(NodeIndex n) const { return names_[n]; }
  int32_t cpu_capacity(NodeIndex n) const { return cpu_capacity_[n]; }
  int32_t memory_capacity(NodeIndex n) const { return memory_capacity_[n]; }
  int32_t cpu_free(NodeIndex n) const { return cpu_free_[n]; }
  int32_t memory_free(NodeIndex n) const { return memory_free_[n]; }
  int gpu_count(NodeIndex n) const { return gpu_count_[n]; }
  int model(NodeIndex n) const { return model_[n]; }  // an id into model_names(); -1 without GPUs
  // Free milli of each GPU of node n, by GPU index.
  std::span<const int16_t> gpu_free(NodeIndex n) const {
    return {gpu_free_.data() + size_t{n} * stride_, static_cast<size_t>(gpu_count_[n])};
  }
  int32_t gpu_free_total(NodeIndex n) const { return gpu_free_total_[n]; }
  int fully_free_gpus(NodeIndex n) const { return fully_free_[n]; }
  int max_gpu_free(NodeIndex n) const { return max_gpu_free_[n]; }
  // The run's tie-break order: among equal scores the lower rank wins.
  uint32_t rank(NodeIndex n) const { return rank_[n]; }
  // Grows by one on every change to node n, so a policy can cache what it derived from the node.
  uint32_t version(NodeIndex n) const { return version_[n]; }

  std::span<const std::string> model_names() const { return model_names_; }
  // The mask of a gpu_spec; an empty spec allows any model; models the cluster lacks are ignored.
  ModelMask model_mask(std::span<const std::string> spec) const;
  bool model_allowed(ModelMask mask, NodeIndex n) const {
    return model_[n] >= 0 && ((mask >> model_[n]) & 1) != 0;
  }

  int64_t gpu_capacity_total() const { return gpu_capacity_total_; }
  int64_t gpu_allocated_total() const { return gpu_allocated_total_; }

  // The experiment's filter: CPU and memory fit; for a GPU pod the model is allowed and, for a
  // sharing pod, some GPU has gpu_milli free, for a whole-GPU pod num_gpu GPUs are fully free.
  bool fits(const Pod& pod, NodeIndex n) const;

  // Engine only (policies get a const reference). Empties every node and sets the ranks
  // (a permutation of 0..node_count()-1).
  void reset(std::span<const uint32_t> ranks);
  // Applies a policy's choice; fails, changing nothing, when the choice breaks the filter or
  // names the wrong GPUs.
  Status apply(const Pod& pod, const Choice& choice);
  // Takes back a pod applied with `choice` (it migrates away). The caller guarantees it was there.
  void release(const Pod& pod, const Choice& choice);

 private:
  size_t stride_ = 0;  // GPU slots per node in gpu_free_: the largest GPU count of the cluster
  std::vector<std::string> names_;
  std::vector<std::string> model_names_;
  std::vector<int32_t> cpu_capacity_, memory_capacity_, cpu_free_, memory_free_;
  std::vector<int8_t> gpu_count_, model_, fully_free_;
  std::vector<int16_t> max_gpu_free_;
  std::vector<int16_t> gpu_free_;
  std::vector<int32_t> gpu_free_total_;
  std::vector<uint32_t> rank_, version_;
  int64_t gpu_capacity_total_ = 0;
  int64_t gpu_allocated_total_ = 0;

  void refresh_gpu_summary(NodeIndex n);
};

// The GPUs a whole-GPU pod takes on node n under every baseline: the lowest-index fully free ones.
// 0 when there are not enough.
uint32_t lowest_free_gpus(const AllocCluster& cluster, NodeIndex n, int count);
// The tightest GPU for a sharing pod: the smallest free milli that still holds `milli`, lowest index
// on ties; -1 when none does.
int tightest_gpu(const AllocCluster& cluster, NodeIndex n, int milli);

}  // namespace cnlab::sim
