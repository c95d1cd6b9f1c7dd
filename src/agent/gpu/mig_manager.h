// Brings a GPU's MIG instances to the layout the scheduler decided.
#pragma once

#include <mutex>
#include <vector>

#include "agent/gpu/gpu_backend.h"

namespace cnlab::agent {

struct MigChange {
  std::vector<model::MigInstance> destroyed;
  std::vector<model::MigInstance> created;

  bool empty() const { return destroyed.empty() && created.empty(); }
};

class MigManager {
 public:
  // `backend` must outlive the manager.
  explicit MigManager(GpuBackend& backend) : backend_(backend) {}

  // Makes the MIG instances of GPU `index` exactly `desired` (model::Gpu::mig_instances, as the
  // scheduler decides): destroys the instances not wanted, then creates the missing ones (each a
  // GPU instance at its placement plus one compute instance spanning it). Instances already in
  // place are left alone, so a job running in one is not disturbed by a no-op.
  // Refuses, before touching the GPU:
  //   - an index the backend does not have (kNotFound);
  //   - a layout NVIDIA would refuse (model::MigLayout's rules; kInvalidArgument naming
  //     gpus[<index>].mig_instances[<i>] and the instance);
  //   - a GPU with MIG mode off when `desired` is not empty (kFailedPrecondition naming the GPU):
  //     turning MIG on needs a GPU reset, which is the operator's to do, not the agent's;
  //   - a change on a GPU running compute processes (kFailedPrecondition naming the GPU).
  // A driver failure part-way leaves the GPU partly changed; the error says what was done, and the
  // next apply() with the same layout carries on from there. Serializes concurrent calls.
  Result<MigChange> apply(int index, const std::vector<model::MigInstance>& desired);

 private:
  GpuBackend& backend_;
  std::mutex mu_;
};

}  // namespace cnlab::agent
