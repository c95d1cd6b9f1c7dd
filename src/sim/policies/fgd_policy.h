// FGD (Fragmentation Gradient Descent, Weng et al., ATC'23): places a pod where the node's
// fragmentation grows least: score = floor(100 * sigmoid((F(n) - F(n')) / 1000)), n' the node after
// the placement. A sharing pod tries every GPU with enough free milli and keeps the best score
// (lowest index on ties); a whole-GPU pod takes the lowest-index fully free GPUs.
//
// F(n) = sum over the typical pod shapes m of p_m * f_m, with I the node's total free GPU milli:
//   f_m = I when m is CPU-only or its spec excludes the node's model;
//   f_m = the free milli of the GPUs with free < gpu_milli(m), when at least num_gpu(m) GPUs have
//         free >= gpu_milli(m) and the free CPU covers cpu(m);
//   f_m = I otherwise.
// Rewritten as F = I - sum over the fitting shapes of p_m * (free milli of the GPUs with
// free >= gpu_milli(m)), and with p_m = count_m / K, K*F is an integer: differences of F are exact,
// so a placement that leaves F unchanged scores exactly 50.
//
// Speed: per node the per-shape counts and sums are cached until the node changes (its version),
// a candidate n' is derived from them in O(shapes), and each (node, pod shape) score is cached the
// same way, so a run rescores only the node that changed since a pod of that shape last arrived.
#pragma once

#include <unordered_map>
#include <vector>

#include "sim/policies/scored_policy.h"
#include "sim/typical_pods.h"

namespace cnlab::sim {

class FgdPolicy : public ScoredPolicy {
 public:
  // `typical`: the distribution of the workload's original trace (see typical_pods()).
  explicit FgdPolicy(TypicalPods typical);

  std::string_view name() const override { return "FGD"; }
  void reset(const AllocCluster& cluster, const RunContext& context) override;

  struct Evaluation {
    int score = 0;
    int gpu = -1;  // the GPU a sharing pod takes; -1 for other pods
  };
  // The score of `pod` on node n (which must fit it). reset() must have been called.
  Evaluation evaluate(const Pod& pod, const AllocCluster& cluster, NodeIndex n);
  // F(n) in milli-GPUs, as the node is now.
  double fragmentation(const AllocCluster& cluster, NodeIndex n);

 protected:
  void score_nodes(const Pod& pod, const AllocCluster& cluster, std::span<const NodeIndex> feasible,
                   std::span<int> scores) override;
  uint32_t choose_gpus(const Pod& pod, const AllocCluster& cluster, NodeIndex node) override;

 private:
  struct Shape {  // a typical GPU pod shape whose spec allows one model
    int32_t cpu_milli;
    int32_t gpu_milli;
    int32_t num_gpu;
    int64_t count;
  };
  struct CacheEntry {
    uint32_t stamp = 0;  // the node's version + 1 when computed; 0 = empty
    int16_t score = 0;
    int16_t gpu = -1;
  };

  void ensure_base(const AllocCluster& cluster, NodeIndex n);
  Evaluation compute(const Pod& pod, const AllocCluster& cluster, NodeIndex n);
  int score_of(int64_t delta_times_k) const;
  // The cache row of the pod's shape (cpu, gpu_milli, num_gpu); nullptr past kMaxCachedShapes.
  CacheEntry* cache_row(const Pod& pod);
  Evaluation evaluate_cached(const Pod& pod, const AllocCluster& cluster, NodeIndex n, CacheEntry* row);

  TypicalPods typical_;
  int64_t total_count_ = 0;  // K: the kept pods; p_m = count_m / K
  size_t node_count_ = 0;
  std::vector<std::vector<Shape>> shapes_by_model_;
  size_t stride_ = 0;  // the most shapes of any model

  // Per node, valid while base_stamp_[n] == version(n) + 1: for each shape of the node's model the
  // number of GPUs with free >= gpu_milli and their free milli, and K * (I - F(n)).
  std::vector<uint32_t> base_stamp_;
  std::vector<int8_t> base_count_;
  std::vector<int32_t> base_sum_;
  std::vector<int64_t> base_fit_;

  std::unordered_map<uint64_t, uint32_t> pod_shape_ids_;
  std::vector<CacheEntry> cache_;  // [pod shape id * node_count_ + node]
};

}  // namespace cnlab::sim
