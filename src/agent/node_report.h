// The Node object this agent reports at registration and in every heartbeat: its GPUs as the
// backend sees them (health included), host CPU and memory, and a GpuHealthy condition.
#pragma once

#include <map>
#include <string>

#include "agent/gpu/gpu.h"
#include "model/node.h"

namespace cnlab::agent {

struct HostResources {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
};
// This machine's online CPUs and physical memory.
HostResources detect_host();

struct NodeReportInput {
  std::string name;
  std::map<std::string, std::string> labels;
  HostResources host;
  std::string address;        // where the agent can be reached, host[:port]
  std::string agent_version;
  std::string peer_address = "";  // its peer endpoint, HOST:PORT; empty: it takes no live migrations
  bool gpu_checkpoint = false;    // its runtime checkpoints GPU state (cuda-checkpoint)
};

// `previous` keeps the condition's last_transition while its status does not change.
model::Node node_report(const NodeReportInput& input, const GpuBackend& backend, const model::Node* previous,
                        Time now);

}  // namespace cnlab::agent
