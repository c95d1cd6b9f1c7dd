#include "sim/alloc_ceiling.h"

#include <algorithm>
#include <set>
#include <vector>

namespace cnlab::sim {
namespace {

// Whether `later` cannot fit anywhere once `failed` (a single-GPU pod) fitted nowhere: it asks for
// at least as much of one GPU, CPU and memory, on models `failed` also accepted.
bool cannot_fit_after(const Pod& later, const Pod& failed) {
  return later.num_gpu >= 1 && later.gpu_milli >= failed.gpu_milli && later.cpu_milli >= failed.cpu_milli &&
         later.memory_mib >= failed.memory_mib && (later.allowed_models & ~failed.allowed_models) == 0;
}

// Hole makers of one size that accept the same models: counting only these keeps the argument
// sound on mixed clusters (a maker restricted to one model fails as soon as that model is full,
// which says nothing about the rest of the cluster).
struct MakerClass {
  int32_t size = 0;
  ModelMask models = kAnyModel;
  bool operator<(const MakerClass& o) const { return size != o.size ? size < o.size : models < o.models; }
  bool has(const Pod& pod) const { return pod.num_gpu == 1 && pod.gpu_milli == size && pod.allowed_models == models; }
};

int64_t ceiling_for(const MakerClass& maker, std::span<const Pod> pods, std::span<const uint32_t> order,
                    int64_t capacity) {
  const int32_t hole = kGpuMilli - maker.size;
  int64_t small_pods_milli = 0;
  for (uint32_t index : order) {
    const Pod& pod = pods[index];
    if (pod.num_gpu == 1 && pod.gpu_milli <= hole) small_pods_milli += pod.gpu_milli;
  }
  // No hole maker fails: all of them are placed, and the allocation is at most what arrived.
  int64_t arrived = 0;
  int64_t makers = 0;
  for (uint32_t index : order) {
    arrived += pods[index].gpu_request();
    makers += maker.has(pods[index]);
  }
  int64_t best = std::min({capacity, arrived, capacity - hole * makers + small_pods_milli});

  int64_t arrived_before = 0;
  int64_t makers_before = 0;
  for (size_t t = 0; t < order.size(); ++t) {
    const Pod& failed = pods[order[t]];
    if (maker.has(failed)) {
      const int64_t by_holes = capacity - hole * makers_before + small_pods_milli;
      int64_t by_arrivals = arrived_before;
      for (size_t i = t + 1; i < order.size() && by_arrivals < by_holes; ++i) {
        const Pod& later = pods[order[i]];
        if (!cannot_fit_after(later, failed)) by_arrivals += later.gpu_request();
      }
      best = std::max(best, std::min({capacity, by_holes, by_arrivals}));
      ++makers_before;
    }
    arrived_before += failed.gpu_request();
  }
  return best;
}

}  // namespace

AllocationCeiling allocation_ceiling(std::span<const Pod> pods, std::span<const uint32_t> order, int64_t gpu_capacity) {
  std::set<MakerClass> makers;
  for (uint32_t index : order) {
    const Pod& pod = pods[index];
    if (pod.num_gpu == 1 && pod.gpu_milli > kGpuMilli / 2 && pod.gpu_milli < kGpuMilli) {
      makers.insert({pod.gpu_milli, pod.allowed_models});
    }
  }
  int64_t arrived = 0;
  for (uint32_t index : order) arrived += pods[index].gpu_request();
  AllocationCeiling ceiling{std::min(gpu_capacity, arrived), 0};
  for (const MakerClass& maker : makers) {
    const int64_t bound = ceiling_for(maker, pods, order, gpu_capacity);
    if (bound < ceiling.gpu_milli) ceiling = {bound, maker.size};
  }
  return ceiling;
}

}  // namespace cnlab::sim
