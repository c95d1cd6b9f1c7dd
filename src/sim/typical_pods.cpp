#include "sim/typical_pods.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace cnlab::sim {

TypicalPods typical_pods(std::span<const OpenbPod> trace, const AllocCluster& cluster, int coverage_percent) {
  using Key = std::tuple<int64_t, int, int, std::string>;
  std::map<Key, int64_t> counts;
  std::map<Key, const OpenbPod*> example;
  for (const OpenbPod& pod : trace) {
    Key key{pod.cpu_milli, pod.gpu_milli, pod.num_gpu, join_gpu_spec(pod.gpu_spec)};
    if (counts[key]++ == 0) example[key] = &pod;
  }
  std::vector<std::pair<Key, int64_t>> groups(counts.begin(), counts.end());
  std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
    if (a.second != b.second) return a.second > b.second;
    return a.first > b.first;
  });

  TypicalPods out;
  out.total_pods = static_cast<int64_t>(trace.size());
  out.total_types = groups.size();
  for (const auto& [key, count] : groups) {
    if (out.kept_pods * 100 >= out.total_pods * coverage_percent) break;
    const OpenbPod& pod = *example[key];
    TypicalPod type;
    type.cpu_milli = static_cast<int32_t>(pod.cpu_milli);
    type.gpu_milli = pod.gpu_milli;
    type.num_gpu = pod.num_gpu;
    type.gpu_spec = std::get<3>(key);
    type.allowed_models = pod.num_gpu > 0 ? cluster.model_mask(pod.gpu_spec) : kAnyModel;
    type.count = count;
    out.kept_pods += count;
    out.types.push_back(std::move(type));
  }
  return out;
}

}  // namespace cnlab::sim
