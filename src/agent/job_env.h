// The environment a job's process starts with: exactly this, nothing inherited from the agent.
// The slice (CUDA_VISIBLE_DEVICES), CNLab's own variables, and for a gang spread over several nodes
// the rendezvous variables torch.distributed reads (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK,
// NODE_RANK, LOCAL_RANK), so a multi-node job runs unchanged.
#pragma once

#include <string>
#include <vector>

#include "agent/gpu/gpu.h"
#include "model/job.h"

namespace cnlab::agent {

struct JobEnvInput {
  std::string node;              // this node
  int rank = 0;                  // this node's position in the job's placement
  int nodes = 1;                 // how many nodes the placement spans
  std::string master_address;    // host of the placement's first node (rank 0)
  std::vector<std::string> devices;  // CUDA_VISIBLE_DEVICES entries for this node's binding
  bool simulated = false;
  std::string home;              // the job's work directory
  std::string artifacts_dir;
  std::string checkpoint_dir;
};

// The port rank 0 listens on for a gang's rendezvous: the same on every node (derived from the
// job id), in 29500..30499 like torchrun's default 29500.
int master_port_for(const std::string& job_id);

// CUDA_VISIBLE_DEVICES entries for a binding: the GPU's UUID, or its MIG instance's UUID
// ("MIG-..."); for simulated GPUs (no driver to read UUIDs) the index.
Result<std::vector<std::string>> visible_devices(const model::NodeBinding& binding, const std::vector<GpuInfo>& gpus,
                                                 bool simulated);

// The UUIDs of the GPUs (or MIG instances) a binding holds, as this node's backend names them: what
// cuda-checkpoint's device map pairs when a job's GPU state is restored onto other GPUs. Indices
// this node does not have, and MIG instances not created yet, are left out.
std::vector<std::string> gpu_uuids(const model::NodeBinding& binding, const std::vector<GpuInfo>& gpus);

std::vector<std::string> job_environment(const model::Job& job, const JobEnvInput& input);

}  // namespace cnlab::agent
