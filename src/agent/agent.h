// src/agent/agent.h — the node agent (`cnlab agent`): the only header other modules include from
// src/agent. It registers the node, heartbeats its GPUs' health, watches the jobs bound to it and
// runs each under the process runtime (runtime/), with workspaces and artifacts (files/) and the
// GPU backend (gpu/). It is a client of the server's public API with a node credential.
#pragma once

#include <CLI/CLI.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"

namespace cnlab::agent {

struct AgentConfig {
  std::string server;      // https://host:port
  std::string ca_file;     // the CA the server's certificate chains to
  std::string join_token;  // needed only until the node credential is stored
  std::string data_dir;
  std::string node_name;   // default: the host name
  std::map<std::string, std::string> labels;
  std::string simulate_gpus;  // "h100x8,l4x2": the simulated backend instead of NVML
  std::string nvml_library = "libnvidia-ml.so.1";
  std::vector<std::string> shim_command;  // how the runtime starts a job's shim
  std::string run_as;      // the user jobs run as; empty: the agent's own user
  bool use_cgroups = true;
  bool use_namespaces = true;
  std::string cgroup_parent = "cnlab";
  int64_t cpu_milli = 0;   // 0: the machine's
  int64_t memory_mib = 0;  // 0: the machine's
  std::string address;     // reported to the server (a gang's MASTER_ADDR); default: the host name
  std::string metrics_listen;  // "127.0.0.1:9402"; empty: no metrics endpoint
  std::chrono::milliseconds heartbeat_interval{5000};
  std::chrono::milliseconds stop_grace{10000};
  std::chrono::milliseconds checkpoint_grace{30000};  // SIGUSR1 to SIGTERM for a pre-empted checkpointable job
  int64_t workspace_cache_bytes = int64_t{10} << 30;
  // libcnlab-vgpu.so, loaded into every job that holds a GPU (VRAM quota, compute share, IPC
  // isolation, activity); empty: the one beside this binary. `use_vgpu` false runs jobs without.
  std::string vgpu_library;
  bool use_vgpu = true;
  // CRIU, for transparent checkpoints and live migration of checkpointable jobs: empty finds it
  // (find_criu); "none" turns them off (those jobs then save their own state on SIGUSR1).
  std::string criu;
  // NVIDIA's cuda-checkpoint, for the GPU state of jobs holding GPUs in transparent checkpoints:
  // empty finds it (find_cuda_checkpoint); "none" turns it off (those jobs then save their own
  // state on SIGUSR1).
  std::string cuda_checkpoint;
  // Live migrations post-copy: the job runs on the target as soon as all but its memory arrived,
  // and pulls the memory from this node (at `address`) meanwhile, over mutual TLS. Off:
  // stop-and-copy (the whole dump streamed to the target before it runs).
  bool post_copy = false;
  // The port of the peer endpoint (on `address`'s host) where other agents stream migrating jobs
  // to this one over mutual TLS; 0: one the kernel picks (reported to the server either way).
  int peer_port = 0;
  // How often the node certificate is checked and renewed once a third of its life is left.
  std::chrono::milliseconds certificate_check_interval{3600 * 1000};
  // How often a migration's source tells the server it is still dumping, packing or sending: well
  // under the server's --migration-timeout (2 min by default).
  std::chrono::milliseconds migration_progress_every{10000};
};

class Agent {
 public:
  // Registers (or reuses the stored credential), re-adopts the jobs an earlier agent left
  // running, and starts heartbeating and watching. Fails on bad configuration or when the server
  // refuses the node; an unreachable server is retried in the background.
  static Result<std::unique_ptr<Agent>> start(const AgentConfig& config);
  virtual ~Agent() = default;

  virtual const std::string& node_name() const = 0;
  virtual std::string metrics_url() const = 0;  // empty without a metrics endpoint
  // Stops the agent. With `stop_jobs`, the running jobs are stopped first (and reported);
  // without, they keep running and the next agent on this data directory adopts them.
  virtual void stop(bool stop_jobs) = 0;
};

// How the runtime starts a job's shim: the small cnlab-shim beside this binary when it is there (a
// job starts ~20 ms sooner), else this binary's own `agent-shim`.
std::vector<std::string> default_shim_command();

// The interception library beside this binary (build/libcnlab-vgpu.so next to build/cnlab).
std::string default_vgpu_library();

// How many NVIDIA GPUs NVML reports on this machine: 0 without a driver or a usable library (one
// log line says why). `cnlab dev` simulates GPUs where this is 0.
int count_nvidia_gpus(const std::string& nvml_library = "libnvidia-ml.so.1");

// `cnlab agent ...` and the hidden `cnlab agent-shim ...` the runtime starts jobs through.
void add_agent_commands(CLI::App& app);

}  // namespace cnlab::agent
