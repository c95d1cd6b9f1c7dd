#include "sim/policies/fgd_policy.h"

#include <algorithm>
#include <cmath>

namespace cnlab::sim {
namespace {

// Pod shapes beyond this many are scored without the cache, bounding its memory at
// kMaxCachedShapes * nodes * 8 bytes (about 10 MB for the openb cluster). The openb traces have
// fewer than a hundred shapes.
constexpr size_t kMaxCachedShapes = 1024;

}  // namespace

FgdPolicy::FgdPolicy(TypicalPods typical) : typical_(std::move(typical)) {
  for (const TypicalPod& t : typical_.types) total_count_ += t.count;
}

void FgdPolicy::reset(const AllocCluster& cluster, const RunContext& /*context*/) {
  node_count_ = cluster.node_count();
  shapes_by_model_.assign(cluster.model_names().size(), {});
  for (size_t m = 0; m < shapes_by_model_.size(); ++m) {
    for (const TypicalPod& t : typical_.types) {
      // CPU-only shapes and shapes whose spec excludes the model contribute f_m = I whatever the
      // node's state, so they only appear through the I*K term.
      if (t.num_gpu == 0 || ((t.allowed_models >> m) & 1) == 0) continue;
      shapes_by_model_[m].push_back({t.cpu_milli, t.gpu_milli, t.num_gpu, t.count});
    }
  }
  stride_ = 0;
  for (const auto& shapes : shapes_by_model_) stride_ = std::max(stride_, shapes.size());
  base_stamp_.assign(node_count_, 0);
  base_count_.assign(node_count_ * stride_, 0);
  base_sum_.assign(node_count_ * stride_, 0);
  base_fit_.assign(node_count_, 0);
  pod_shape_ids_.clear();
  cache_.clear();
}

void FgdPolicy::ensure_base(const AllocCluster& cluster, NodeIndex n) {
  uint32_t stamp = cluster.version(n) + 1;
  if (base_stamp_[n] == stamp) return;
  base_stamp_[n] = stamp;
  base_fit_[n] = 0;
  int model = cluster.model(n);
  if (model < 0) return;
  const auto& shapes = shapes_by_model_[static_cast<size_t>(model)];
  auto free = cluster.gpu_free(n);
  int32_t cpu_free = cluster.cpu_free(n);
  for (size_t j = 0; j < shapes.size(); ++j) {
    int count = 0, sum = 0;
    for (int16_t f : free) {
      if (f >= shapes[j].gpu_milli) ++count, sum += f;
    }
    base_count_[n * stride_ + j] = static_cast<int8_t>(count);
    base_sum_[n * stride_ + j] = sum;
    if (cpu_free >= shapes[j].cpu_milli && count >= shapes[j].num_gpu) base_fit_[n] += shapes[j].count * sum;
  }
}

double FgdPolicy::fragmentation(const AllocCluster& cluster, NodeIndex n) {
  CNLAB_CHECK_MSG(node_count_ == cluster.node_count(), "FgdPolicy::reset() was not called for this cluster");
  if (total_count_ == 0) return 0;
  ensure_base(cluster, n);
  return static_cast<double>(int64_t{cluster.gpu_free_total(n)} * total_count_ - base_fit_[n]) /
         static_cast<double>(total_count_);
}

int FgdPolicy::score_of(int64_t delta_times_k) const {
  if (total_count_ == 0) return 50;
  double x = static_cast<double>(delta_times_k) / (1000.0 * static_cast<double>(total_count_));
  return static_cast<int>(100.0 / (1.0 + std::exp(-x)));
}

FgdPolicy::Evaluation FgdPolicy::compute(const Pod& pod, const AllocCluster& cluster, NodeIndex n) {
  ensure_base(cluster, n);
  int model = cluster.model(n);
  static const std::vector<Shape> kNone;
  const auto& shapes = model < 0 ? kNone : shapes_by_model_[static_cast<size_t>(model)];
  const int8_t* count = base_count_.data() + n * stride_;
  const int32_t* sum = base_sum_.data() + n * stride_;
  const int64_t fit_before = base_fit_[n];
  const int32_t cpu_after = cluster.cpu_free(n) - pod.cpu_milli;
  const int64_t k = total_count_;

  switch (pod.kind()) {
    case PodKind::kCpuOnly: {
      int64_t fit_after = 0;
      for (size_t j = 0; j < shapes.size(); ++j) {
        if (cpu_after >= shapes[j].cpu_milli && count[j] >= shapes[j].num_gpu) fit_after += shapes[j].count * sum[j];
      }
      return {score_of(fit_after - fit_before), -1};
    }
    case PodKind::kWholeGpu: {
      // Fully free GPUs hold every shape's gpu_milli, so each shape loses num_gpu of its GPUs.
      const int taken = pod.num_gpu;
      int64_t fit_after = 0;
      for (size_t j = 0; j < shapes.size(); ++j) {
        if (cpu_after >= shapes[j].cpu_milli && count[j] - taken >= shapes[j].num_gpu) {
          fit_after += shapes[j].count * (sum[j] - int64_t{kGpuMilli} * taken);
        }
      }
      return {score_of(int64_t{kGpuMilli} * taken * k - fit_before + fit_after), -1};
    }
    case PodKind::kSharing: {
      Evaluation best{-1, -1};
      auto free = cluster.gpu_free(n);
      const int request = pod.gpu_milli;
      for (size_t g = 0; g < free.size(); ++g) {
        const int before = free[g];
        if (before < request) continue;
        // A GPU with the same free milli as an earlier one gives the same n', and the earlier wins.
        bool seen = false;
        for (size_t h = 0; h < g && !seen; ++h) seen = free[h] == before;
        if (seen) continue;
        const int after = before - request;
        int64_t fit_after = 0;
        for (size_t j = 0; j < shapes.size(); ++j) {
          int c = count[j];
          int64_t s = sum[j];
          if (shapes[j].gpu_milli <= after) {
            s -= request;
          } else if (shapes[j].gpu_milli <= before) {
            c -= 1;
            s -= before;
          }
          if (cpu_after >= shapes[j].cpu_milli && c >= shapes[j].num_gpu) fit_after += shapes[j].count * s;
        }
        int score = score_of(int64_t{request} * k - fit_before + fit_after);
        if (score > best.score) best = {score, static_cast<int>(g)};
      }
      return best;
    }
  }
  return {};
}

FgdPolicy::CacheEntry* FgdPolicy::cache_row(const Pod& pod) {
  uint64_t key = (uint64_t(uint32_t(pod.cpu_milli)) << 21) | (uint64_t(uint32_t(pod.gpu_milli)) << 5) |
                 uint64_t(uint32_t(pod.num_gpu));
  auto [it, inserted] = pod_shape_ids_.try_emplace(key, static_cast<uint32_t>(pod_shape_ids_.size()));
  if (it->second >= kMaxCachedShapes) return nullptr;
  if (inserted) cache_.resize(cache_.size() + node_count_);
  return &cache_[size_t{it->second} * node_count_];
}

FgdPolicy::Evaluation FgdPolicy::evaluate_cached(const Pod& pod, const AllocCluster& cluster, NodeIndex n,
                                                 CacheEntry* row) {
  uint32_t stamp = cluster.version(n) + 1;
  if (row != nullptr && row[n].stamp == stamp) return {row[n].score, row[n].gpu};
  Evaluation e = compute(pod, cluster, n);
  if (row != nullptr) row[n] = {stamp, static_cast<int16_t>(e.score), static_cast<int16_t>(e.gpu)};
  return e;
}

FgdPolicy::Evaluation FgdPolicy::evaluate(const Pod& pod, const AllocCluster& cluster, NodeIndex n) {
  CNLAB_CHECK_MSG(node_count_ == cluster.node_count(), "FgdPolicy::reset() was not called for this cluster");
  return evaluate_cached(pod, cluster, n, cache_row(pod));
}

void FgdPolicy::score_nodes(const Pod& pod, const AllocCluster& cluster, std::span<const NodeIndex> feasible,
                            std::span<int> scores) {
  CNLAB_CHECK_MSG(node_count_ == cluster.node_count(), "FgdPolicy::reset() was not called for this cluster");
  CacheEntry* row = cache_row(pod);
  for (size_t i = 0; i < feasible.size(); ++i) scores[i] = evaluate_cached(pod, cluster, feasible[i], row).score;
}

uint32_t FgdPolicy::choose_gpus(const Pod& pod, const AllocCluster& cluster, NodeIndex node) {
  if (pod.kind() != PodKind::kSharing) return ScoredPolicy::choose_gpus(pod, cluster, node);
  int g = evaluate(pod, cluster, node).gpu;
  return g < 0 ? 0 : uint32_t{1} << g;
}

}  // namespace cnlab::sim
