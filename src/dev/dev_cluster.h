// A whole CNLab on one machine: the control plane on its own data directory (prepared on first
// start) and one node agent registered with it, in this process.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "common/result.h"
#include "sched/policy_config.h"

namespace cnlab::dev {

struct DevConfig {
  std::string data_dir;                  // DIR/server and DIR/agent below it
  std::string listen = "127.0.0.1:8443";
  std::string simulate_gpus;             // empty: the machine's GPUs, or "h100x2" simulated if it has none
  std::string node_name;                 // default: the host name
  std::string metrics_listen = "127.0.0.1:9402";
  std::chrono::milliseconds stop_grace{10000};
  std::optional<sched::PolicyConfig> policy;  // the scheduler's (--scheduler-config); else its defaults
};

struct DevInfo {
  std::string url;
  std::string node;
  std::string ca_file;
  std::string admin_token;  // the credential itself
  std::string gpus;         // what the node has, in words: "2 simulated h100 (no NVIDIA GPU found)"
};

class DevCluster {
 public:
  // Prepares DIR on first use, starts the control plane and the agent, and returns once the node
  // is Ready with its GPUs, so that a job submitted right after can be placed.
  static Result<std::unique_ptr<DevCluster>> start(const DevConfig& config);
  virtual ~DevCluster() = default;
  virtual const DevInfo& info() const = 0;
  // Stops the running jobs (each reported), then the agent, then the control plane. State stays
  // on disk for the next start. Idempotent.
  virtual void stop() = 0;
};

// $XDG_DATA_HOME/cnlab, else ~/.local/share/cnlab.
std::string default_data_dir();

}  // namespace cnlab::dev
