#include "agent/job_env.h"

#include <fmt/format.h>

#include <functional>
#include <map>

namespace cnlab::agent {

int master_port_for(const std::string& job_id) {
  // FNV-1a: stable across builds and machines, unlike std::hash.
  uint32_t hash = 2166136261u;
  for (unsigned char c : job_id) hash = (hash ^ c) * 16777619u;
  return 29500 + static_cast<int>(hash % 1000);
}

Result<std::vector<std::string>> visible_devices(const model::NodeBinding& binding, const std::vector<GpuInfo>& gpus,
                                                 bool simulated) {
  std::vector<std::string> devices;
  for (const auto& g : binding.gpus) {
    if (g.index < 0 || g.index >= static_cast<int>(gpus.size())) {
      return Error::invalid_argument("placement.gpus.index", std::to_string(g.index),
                                     fmt::format("this node has GPUs 0..{}", static_cast<int>(gpus.size()) - 1));
    }
    const GpuInfo& gpu = gpus[static_cast<size_t>(g.index)];
    if (simulated) {
      devices.push_back(std::to_string(g.index));
      continue;
    }
    if (g.mig_start >= 0) {
      std::string uuid;
      for (const auto& mig : gpu.mig_devices) {
        if (mig.instance.start == g.mig_start) uuid = mig.uuid;
      }
      if (uuid.empty()) {
        return Error::failed_precondition(fmt::format("GPU {} has no MIG instance at slot {} (the layout the scheduler "
                                                      "decided is not applied yet)",
                                                      g.index, g.mig_start));
      }
      devices.push_back(uuid);
    } else {
      devices.push_back(gpu.uuid);
    }
  }
  return devices;
}

std::vector<std::string> gpu_uuids(const model::NodeBinding& binding, const std::vector<GpuInfo>& gpus) {
  std::vector<std::string> uuids;
  for (const auto& g : binding.gpus) {
    if (g.index < 0 || g.index >= static_cast<int>(gpus.size())) continue;
    const GpuInfo& gpu = gpus[static_cast<size_t>(g.index)];
    if (g.mig_start < 0) {
      uuids.push_back(gpu.uuid);
      continue;
    }
    for (const auto& mig : gpu.mig_devices) {
      if (mig.instance.start == g.mig_start) uuids.push_back(mig.uuid);
    }
  }
  return uuids;
}

std::vector<std::string> job_environment(const model::Job& job, const JobEnvInput& input) {
  std::map<std::string, std::string> env;
  // A plain, predictable base; the job's own variables override it.
  env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  env["HOME"] = input.home;
  env["LANG"] = "C.UTF-8";
  env["PYTHONUNBUFFERED"] = "1";  // output reaches `cnlab logs -f` as it is printed, not at exit
  for (const auto& [k, v] : job.spec.env) env[k] = v;
  // What CNLab decides is not the job's to override.
  std::string devices;
  for (const auto& d : input.devices) devices += (devices.empty() ? "" : ",") + d;
  env["CUDA_VISIBLE_DEVICES"] = devices;
  env["NVIDIA_VISIBLE_DEVICES"] = devices.empty() ? "void" : devices;
  env["CNLAB_JOB_ID"] = job.meta.name;
  env["CNLAB_PROJECT"] = job.spec.project;
  env["CNLAB_NODE"] = input.node;
  env["CNLAB_ARTIFACTS_DIR"] = input.artifacts_dir;
  env["CNLAB_CHECKPOINT_DIR"] = input.checkpoint_dir;
  env["CNLAB_GPUS_SIMULATED"] = input.simulated ? "1" : "0";
  env["CNLAB_NNODES"] = std::to_string(input.nodes);
  env["CNLAB_NODE_RANK"] = std::to_string(input.rank);
  env["CNLAB_GPUS_PER_NODE"] = std::to_string(input.devices.size());
  if (input.nodes > 1) {
    env["MASTER_ADDR"] = input.master_address;
    env["MASTER_PORT"] = std::to_string(master_port_for(job.meta.name));
    env["WORLD_SIZE"] = std::to_string(input.nodes);  // one process per node, as CNLab starts them
    env["RANK"] = std::to_string(input.rank);
    env["NODE_RANK"] = std::to_string(input.rank);
    env["LOCAL_RANK"] = "0";
  }
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

}  // namespace cnlab::agent
