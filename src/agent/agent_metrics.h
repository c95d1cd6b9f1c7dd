// The agent's /metrics, in the Prometheus text format. Names start with `cnlab_agent_` and carry
// what only CNLab knows (blocks, quotas, jobs, simulated GPUs); device telemetry that NVIDIA's DCGM
// exporter already gives (clocks, power, temperatures, per-SM activity) is not repeated. Labels
// `gpu` (index on the node) and `uuid` match DCGM's so the two join in queries.
#pragma once

#include <string>
#include <vector>

#include "agent/gpu/gpu.h"
#include "agent/job_runner.h"
#include "agent/vgpu_node.h"
#include "model/job.h"

namespace cnlab::agent {

struct JobMetrics {
  std::string job;
  std::string project;
  model::NodeBinding binding;  // this node's GPUs of the job
  bool running = false;
};

struct AgentMetricsInput {
  std::string node;
  std::vector<GpuInfo> gpus;
  std::vector<GpuUsage> usage;  // per GPU, where the backend could tell
  std::vector<JobMetrics> jobs;
  const RunnerCounters* counters = nullptr;
  int64_t heartbeats_ok = 0;
  int64_t heartbeats_failed = 0;
  int64_t rss_bytes = 0;
  double cpu_seconds = 0;
  // What libcnlab-vgpu.so's tenants (the jobs holding GPUs) recorded, as the vGPU loop last saw it;
  // empty without the library.
  std::vector<VgpuTenantSample> vgpu;
};

std::string render_agent_metrics(const AgentMetricsInput& input);

}  // namespace cnlab::agent
