#include "agent/node_report.h"

#include <unistd.h>

#include <fmt/format.h>

namespace cnlab::agent {

HostResources detect_host() {
  HostResources host;
  long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  long pages = ::sysconf(_SC_PHYS_PAGES);
  long page_size = ::sysconf(_SC_PAGE_SIZE);
  host.cpu_milli = cpus > 0 ? cpus * 1000 : 1000;
  host.memory_mib = pages > 0 && page_size > 0 ? static_cast<int64_t>(pages) * page_size / (1 << 20) : 1024;
  return host;
}

model::Node node_report(const NodeReportInput& input, const GpuBackend& backend, const model::Node* previous,
                        Time now) {
  model::Node node;
  node.meta.name = input.name;
  node.meta.labels = input.labels;
  node.cpu_milli = input.host.cpu_milli;
  node.memory_mib = input.host.memory_mib;
  node.address = input.address;
  node.peer_address = input.peer_address;
  node.gpu_checkpoint = input.gpu_checkpoint;
  node.agent_version = input.agent_version;
  std::vector<GpuInfo> gpus = backend.gpus();
  node.gpus = to_model_gpus(gpus);
  node.simulated = backend.kind() == "simulated";

  int healthy = 0;
  std::string reasons;
  for (const auto& gpu : gpus) {
    if (gpu.healthy) {
      ++healthy;
    } else {
      reasons += fmt::format("{}gpu{}: {}", reasons.empty() ? "" : "; ", gpu.index, gpu.unhealthy_reason);
    }
  }
  model::NodeCondition condition;
  condition.type = "GpuHealthy";
  condition.status = healthy == static_cast<int>(gpus.size());
  condition.reason = condition.status ? "AllHealthy" : "GpuFault";
  condition.message = fmt::format("{} of {} GPUs healthy{}{}", healthy, gpus.size(), reasons.empty() ? "" : ": ", reasons);
  condition.last_transition = now;
  if (previous) {
    for (const auto& c : previous->conditions) {
      if (c.type == condition.type && c.status == condition.status) condition.last_transition = c.last_transition;
    }
  }
  node.conditions.push_back(std::move(condition));
  return node;
}

}  // namespace cnlab::agent
