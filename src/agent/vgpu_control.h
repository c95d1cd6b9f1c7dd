// The agent's vGPU loop (a thread of its own): every `compute_period` the share control law over
// each GPU, from the GPU time NVML says each process used (a process is its job's by the
// CNLAB_VGPU_TENANT in its environment); every second the memory control (bursts, take-backs, move
// requests) and activity; each limit change, move request and newly seen activity reported to the
// server on the job's status (PUT /v1/jobs/{id}/status: memory_event, move_requested,
// gpu_active_at), where it is recorded as an event and audited.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/gpu/gpu_backend.h"
#include "agent/server_api.h"
#include "agent/vgpu_node.h"

namespace cnlab::agent {

class VgpuControl {
 public:
  struct Options {
    // A second: NVML samples a GPU's processes too sparsely for less (vgpu/share_control.cpp).
    std::chrono::milliseconds compute_period{1000};
    std::chrono::milliseconds memory_period{1000};
    // Activity is reported at most this often per job (the server's idle limits are minutes).
    std::chrono::seconds activity_report_every{30};
  };
  // `priority_of(job)`: lower goes first when a job must be moved (its class's rank).
  VgpuControl(VgpuNode& node, GpuBackend& gpus, std::function<std::unique_ptr<ServerApi>()> api,
              std::function<int(const std::string& job)> priority_of, Options options);
  ~VgpuControl();
  void start();
  void stop();

  // The latest sample, for the agent's /metrics.
  std::vector<VgpuTenantSample> last_sample() const;

 private:
  void run();
  void memory_round(ServerApi& api);
  void compute_round();
  // The job whose process `pid` is (by its environment), cached by pid; "" when none.
  std::string job_of_pid(int pid);

  VgpuNode& node_;
  GpuBackend& gpus_;
  std::function<std::unique_ptr<ServerApi>()> make_api_;
  std::function<int(const std::string&)> priority_of_;
  Options options_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  mutable std::mutex sample_mutex_;
  std::vector<VgpuTenantSample> last_sample_;
  std::map<std::string, Time> reported_active_;  // job -> the activity time last reported
  std::map<int, std::pair<uint64_t, std::string>> pid_jobs_;  // pid -> (start ticks, job)
  std::unique_ptr<ServerApi> api_;
};

}  // namespace cnlab::agent
