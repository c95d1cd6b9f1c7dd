#include "agent/agent_metrics.h"

#include <fmt/format.h>

#include <map>

namespace cnlab::agent {
namespace {

// Label values escaped as the exposition format asks.
std::string escape(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

class Writer {
 public:
  void family(const char* name, const char* type, const char* help) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void sample(const char* name, const std::vector<std::pair<const char*, std::string>>& labels, double value) {
    out_ += name;
    if (!labels.empty()) {
      out_ += '{';
      for (size_t i = 0; i < labels.size(); ++i) {
        out_ += fmt::format("{}{}=\"{}\"", i ? "," : "", labels[i].first, escape(labels[i].second));
      }
      out_ += '}';
    }
    out_ += fmt::format(" {}\n", value);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace

std::string render_agent_metrics(const AgentMetricsInput& in) {
  Writer w;
  auto gpu_labels = [&](const GpuInfo& g) -> std::vector<std::pair<const char*, std::string>> {
    return {{"gpu", std::to_string(g.index)},
            {"uuid", g.uuid},
            {"model", std::string(model::gpu_model(g.model).name)},
            {"simulated", g.simulated ? "true" : "false"}};
  };
  w.family("cnlab_agent_gpu_info", "gauge", "The node's GPUs (1 each); simulated=\"true\" for the simulated backend's");
  for (const auto& g : in.gpus) w.sample("cnlab_agent_gpu_info", gpu_labels(g), 1);
  w.family("cnlab_agent_gpu_healthy", "gauge", "1 while the GPU is healthy, 0 after an Xid or uncorrectable ECC error");
  for (const auto& g : in.gpus) w.sample("cnlab_agent_gpu_healthy", gpu_labels(g), g.healthy ? 1 : 0);

  // Blocks and VRAM quotas held on each GPU, from the jobs bound here.
  std::map<int, double> blocks, vram_mib;
  for (const auto& j : in.jobs) {
    for (const auto& g : j.binding.gpus) {
      blocks[g.index] += g.blocks;
      vram_mib[g.index] += static_cast<double>(g.vram_mib);
    }
  }
  w.family("cnlab_agent_gpu_blocks_allocated", "gauge", "1% blocks of the GPU held by jobs bound to this node");
  for (const auto& g : in.gpus) w.sample("cnlab_agent_gpu_blocks_allocated", gpu_labels(g), blocks[g.index]);
  w.family("cnlab_agent_gpu_vram_quota_bytes", "gauge", "VRAM quotas of the jobs on the GPU, summed");
  for (const auto& g : in.gpus) {
    w.sample("cnlab_agent_gpu_vram_quota_bytes", gpu_labels(g), vram_mib[g.index] * 1048576.0);
  }
  w.family("cnlab_agent_gpu_memory_total_bytes", "gauge", "The GPU's memory as the backend reports it");
  w.family("cnlab_agent_gpu_memory_used_bytes", "gauge", "GPU memory in use as the backend reports it");
  w.family("cnlab_agent_gpu_utilization_ratio", "gauge", "GPU busy time over the driver's last sample period, 0..1");
  for (const auto& u : in.usage) {
    if (u.index < 0 || u.index >= static_cast<int>(in.gpus.size())) continue;
    auto labels = gpu_labels(in.gpus[static_cast<size_t>(u.index)]);
    w.sample("cnlab_agent_gpu_memory_total_bytes", labels, static_cast<double>(u.memory_total_mib) * 1048576.0);
    w.sample("cnlab_agent_gpu_memory_used_bytes", labels, static_cast<double>(u.memory_used_mib) * 1048576.0);
    if (u.utilization_percent) w.sample("cnlab_agent_gpu_utilization_ratio", labels, *u.utilization_percent / 100.0);
  }

  w.family("cnlab_agent_job_blocks", "gauge", "1% blocks a job holds on one GPU of this node");
  w.family("cnlab_agent_job_vram_quota_bytes", "gauge", "A job's VRAM quota on one GPU of this node");
  for (const auto& j : in.jobs) {
    for (const auto& g : j.binding.gpus) {
      std::vector<std::pair<const char*, std::string>> labels = {
          {"job", j.job}, {"project", j.project}, {"gpu", std::to_string(g.index)}};
      w.sample("cnlab_agent_job_blocks", labels, g.blocks);
      w.sample("cnlab_agent_job_vram_quota_bytes", labels, static_cast<double>(g.vram_mib) * 1048576.0);
    }
  }
  // From the interception library, per job and GPU (uuid: the GPU's or its MIG instance's).
  w.family("cnlab_agent_vgpu_memory_used_bytes", "gauge", "VRAM a job's processes hold on one GPU, as libcnlab-vgpu.so counts it");
  w.family("cnlab_agent_vgpu_memory_limit_bytes", "gauge", "A job's VRAM limit on one GPU now: its quota and any burst granted");
  w.family("cnlab_agent_vgpu_memory_quota_bytes", "gauge", "A job's guaranteed VRAM quota on one GPU");
  w.family("cnlab_agent_vgpu_oom_refusals_total", "counter", "Allocations of a job refused for its VRAM limit");
  w.family("cnlab_agent_vgpu_launch_interval_seconds", "gauge", "The pacing of a job's kernel launches on one GPU (0: none)");
  for (const auto& t : in.vgpu) {
    for (const auto& g : t.gpus) {
      std::vector<std::pair<const char*, std::string>> labels = {{"job", t.job}, {"uuid", g.uuid}};
      w.sample("cnlab_agent_vgpu_memory_used_bytes", labels, static_cast<double>(g.usage_bytes));
      w.sample("cnlab_agent_vgpu_memory_limit_bytes", labels, static_cast<double>(g.limit_bytes));
      w.sample("cnlab_agent_vgpu_memory_quota_bytes", labels, static_cast<double>(g.quota_bytes));
      w.sample("cnlab_agent_vgpu_oom_refusals_total", labels, static_cast<double>(g.oom_refusals));
      w.sample("cnlab_agent_vgpu_launch_interval_seconds", labels, static_cast<double>(g.launch_interval_ns) / 1e9);
    }
  }
  w.family("cnlab_agent_vgpu_launches_total", "counter", "Kernel launches of a job's processes");
  w.family("cnlab_agent_vgpu_copies_total", "counter", "Memory copies of a job's processes");
  w.family("cnlab_agent_vgpu_ipc_refusals_total", "counter", "CUDA IPC handles of other tenants a job tried to open");
  w.family("cnlab_agent_vgpu_last_active_timestamp_seconds", "gauge", "When a job last launched a kernel or copied memory");
  for (const auto& t : in.vgpu) {
    std::vector<std::pair<const char*, std::string>> labels = {{"job", t.job}};
    w.sample("cnlab_agent_vgpu_launches_total", labels, static_cast<double>(t.launches));
    w.sample("cnlab_agent_vgpu_copies_total", labels, static_cast<double>(t.copies));
    w.sample("cnlab_agent_vgpu_ipc_refusals_total", labels, static_cast<double>(t.ipc_refusals));
    if (t.last_active) {
      w.sample("cnlab_agent_vgpu_last_active_timestamp_seconds", labels,
               static_cast<double>(t.last_active->time_since_epoch().count()));
    }
  }
  int running = 0;
  for (const auto& j : in.jobs) running += j.running;
  w.family("cnlab_agent_jobs_running", "gauge", "Job processes running on this node");
  w.sample("cnlab_agent_jobs_running", {}, running);
  if (in.counters) {
    const RunnerCounters& c = *in.counters;
    w.family("cnlab_agent_jobs_started_total", "counter", "Job processes started");
    w.sample("cnlab_agent_jobs_started_total", {}, static_cast<double>(c.jobs_started.load()));
    w.family("cnlab_agent_jobs_finished_total", "counter", "Jobs whose end was reported and files removed");
    w.sample("cnlab_agent_jobs_finished_total", {}, static_cast<double>(c.jobs_finished.load()));
    w.family("cnlab_agent_job_start_failures_total", "counter", "Jobs that could not be started");
    w.sample("cnlab_agent_job_start_failures_total", {}, static_cast<double>(c.start_failures.load()));
    w.family("cnlab_agent_log_lines_shipped_total", "counter", "Output lines the server acknowledged");
    w.sample("cnlab_agent_log_lines_shipped_total", {}, static_cast<double>(c.log_lines_shipped.load()));
    w.family("cnlab_agent_artifacts_uploaded_total", "counter", "Artifact files uploaded");
    w.sample("cnlab_agent_artifacts_uploaded_total", {}, static_cast<double>(c.artifacts_uploaded.load()));
  }
  w.family("cnlab_agent_heartbeats_total", "counter", "Heartbeats sent, by result");
  w.sample("cnlab_agent_heartbeats_total", {{"result", "ok"}}, static_cast<double>(in.heartbeats_ok));
  w.sample("cnlab_agent_heartbeats_total", {{"result", "failed"}}, static_cast<double>(in.heartbeats_failed));
  w.family("cnlab_agent_resident_memory_bytes", "gauge", "The agent's own resident memory");
  w.sample("cnlab_agent_resident_memory_bytes", {}, static_cast<double>(in.rss_bytes));
  w.family("cnlab_agent_cpu_seconds_total", "counter", "CPU time the agent itself used");
  w.sample("cnlab_agent_cpu_seconds_total", {}, in.cpu_seconds);
  return w.take();
}

}  // namespace cnlab::agent
