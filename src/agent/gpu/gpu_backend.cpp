#include "agent/gpu/gpu_backend.h"

namespace cnlab::agent {

std::vector<model::MigInstance> GpuInfo::mig_instances() const {
  std::vector<model::MigInstance> out;
  out.reserve(mig_devices.size());
  for (const auto& d : mig_devices) out.push_back(d.instance);
  return out;
}

std::vector<model::Gpu> to_model_gpus(const std::vector<GpuInfo>& gpus) {
  std::vector<model::Gpu> out;
  out.reserve(gpus.size());
  for (const GpuInfo& info : gpus) {
    model::Gpu g;
    g.index = info.index;
    g.uuid = info.uuid;
    g.model = info.model;
    g.memory_mib = info.memory_mib;
    g.healthy = info.healthy;
    g.mig_enabled = info.mig_enabled;
    if (info.mig_enabled) g.mig_instances = info.mig_instances();
    g.simulated = info.simulated;
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace cnlab::agent
