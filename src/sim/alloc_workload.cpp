#include "sim/alloc_workload.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "sim/rng.h"

namespace cnlab::sim {

Result<Workload> make_workload(std::string name, std::span<const OpenbPod> trace, const AllocCluster& cluster) {
  Workload w;
  w.name = std::move(name);
  std::vector<const OpenbPod*> sorted;
  sorted.reserve(trace.size());
  for (const OpenbPod& pod : trace) sorted.push_back(&pod);
  std::stable_sort(sorted.begin(), sorted.end(), [](const OpenbPod* a, const OpenbPod* b) { return a->name < b->name; });
  w.pods.reserve(sorted.size());
  for (const OpenbPod* p : sorted) {
    if (p->num_gpu < 0 || p->num_gpu > kMaxGpusPerNode || p->gpu_milli < 0 || p->gpu_milli > kGpuMilli ||
        (p->num_gpu == 0) != (p->gpu_milli == 0) || (p->num_gpu > 1 && p->gpu_milli != kGpuMilli) || p->cpu_milli < 0 || p->cpu_milli > kMaxResourceValue ||
        p->memory_mib < 0 || p->memory_mib > kMaxResourceValue) {
      return Error::invalid_argument(
          fmt::format("{}: pod {}", w.name, p->name),
          fmt::format("cpu_milli={} memory_mib={} num_gpu={} gpu_milli={}", p->cpu_milli, p->memory_mib,
                      p->num_gpu, p->gpu_milli),
          fmt::format("expected num_gpu 0..{}, gpu_milli 0 without GPUs, 1..1000 with one, 1000 with several; "
                      "cpu and memory 0..{}",
                      kMaxGpusPerNode, kMaxResourceValue));
    }
    Pod pod;
    pod.cpu_milli = static_cast<int32_t>(p->cpu_milli);
    pod.memory_mib = static_cast<int32_t>(p->memory_mib);
    pod.num_gpu = p->num_gpu;
    pod.gpu_milli = p->gpu_milli;
    pod.allowed_models = p->num_gpu > 0 ? cluster.model_mask(p->gpu_spec) : kAnyModel;
    w.pods.push_back(pod);
  }
  w.typical = typical_pods(trace, cluster);
  return w;
}

RunPlan make_run_plan(std::span<const Pod> pods, size_t node_count, int64_t gpu_capacity, uint64_t seed,
                      int tune_percent) {
  Rng rng(seed);
  RunPlan plan;
  plan.order.resize(pods.size());
  std::iota(plan.order.begin(), plan.order.end(), 0u);
  rng.shuffle(std::span<uint32_t>(plan.order));

  // Compared as 100*R against tune_percent*C so that T = 1.3*C carries no rounding.
  const int64_t target = int64_t{tune_percent} * gpu_capacity;
  int64_t requested = 0;
  for (const Pod& pod : pods) requested += pod.gpu_request();
  if (requested > 0 && 100 * requested < target) {
    while (true) {
      auto i = static_cast<uint32_t>(rng.below(pods.size()));
      if (100 * (requested + pods[i].gpu_milli) > target) break;
      plan.order.push_back(i);
      requested += pods[i].gpu_request();
    }
  } else if (100 * requested > target) {
    while (100 * requested > target) {
      auto j = static_cast<ptrdiff_t>(rng.below(plan.order.size()));
      requested -= pods[plan.order[static_cast<size_t>(j)]].gpu_request();
      plan.order.erase(plan.order.begin() + j);
    }
  }

  plan.ranks.resize(node_count);
  std::iota(plan.ranks.begin(), plan.ranks.end(), 0u);
  rng.shuffle(std::span<uint32_t>(plan.ranks));
  return plan;
}

}  // namespace cnlab::sim
