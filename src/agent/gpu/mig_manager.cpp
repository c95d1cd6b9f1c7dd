#include "agent/gpu/mig_manager.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace cnlab::agent {
namespace {

bool contains(const std::vector<model::MigInstance>& list, const model::MigInstance& x) {
  return std::find(list.begin(), list.end(), x) != list.end();
}

std::string describe(model::ModelId model, const std::vector<model::MigInstance>& instances) {
  std::string out;
  for (const auto& i : instances) {
    if (!out.empty()) out += ',';
    const auto& profiles = model::gpu_model(model).mig_profiles;
    if (i.profile >= 0 && i.profile < static_cast<int>(profiles.size())) {
      out += fmt::format("{}@{}", profiles[i.profile].name, i.start);
    } else {
      out += fmt::format("profile{}@{}", i.profile, i.start);
    }
  }
  return out.empty() ? "none" : out;
}

Error partly_done(const Error& error, model::ModelId model, const MigChange& done) {
  Error out = error;
  out.message += fmt::format("; done before this failure: destroyed {}, created {}", describe(model, done.destroyed),
                             describe(model, done.created));
  return out;
}

}  // namespace

Result<MigChange> MigManager::apply(int index, const std::vector<model::MigInstance>& desired) {
  std::lock_guard lock(mu_);
  auto gpus = backend_.gpus();
  if (index < 0 || index >= static_cast<int>(gpus.size())) {
    return Error::not_found("gpu", std::to_string(index),
                            fmt::format("this node has {} GPUs (indices 0..{})", gpus.size(),
                                        static_cast<int>(gpus.size()) - 1));
  }
  const GpuInfo& gpu = gpus[index];
  const std::string where = fmt::format("gpus[{}]", index);

  if (!desired.empty()) {
    const model::GpuModel& m = model::gpu_model(gpu.model);
    if (!m.mig_capable()) {
      return Error::invalid_argument(where + ".mig_instances", describe(gpu.model, desired),
                                     fmt::format("GPU {} is a {}, which does not support MIG", index, m.name));
    }
    if (auto layout = model::MigLayout::create(gpu.model, desired); !layout) {
      const Error& e = layout.error();
      return Error::invalid_argument(where + "." + e.field, e.value, e.message);
    }
    if (!gpu.mig_enabled) {
      return Error::failed_precondition(fmt::format(
          "GPU {} (\"{}\") has MIG mode off; enabling it needs a GPU reset, which the agent does not do: with the "
          "GPU idle, run `nvidia-smi -i {} -mig 1` on the node, then restart the agent",
          index, gpu.uuid, gpu.device_index));
    }
  }
  if (!gpu.mig_enabled) return MigChange{};  // nothing wanted, nothing there

  auto current_devices = backend_.read_mig_devices(index);
  if (!current_devices) return current_devices.error();
  std::vector<model::MigInstance> current;
  for (const auto& d : *current_devices) current.push_back(d.instance);

  MigChange plan;
  for (const auto& c : current) {
    if (!contains(desired, c)) plan.destroyed.push_back(c);
  }
  for (const auto& d : desired) {
    if (!contains(current, d)) plan.created.push_back(d);
  }
  if (plan.empty()) return plan;

  auto processes = backend_.compute_processes(index);
  if (!processes) return processes.error();
  if (*processes > 0) {
    return Error::failed_precondition(fmt::format(
        "GPU {} (\"{}\") is busy: {} compute process(es) running; its MIG layout changes only while it is idle "
        "(wanted: destroy {}, create {})",
        index, gpu.uuid, *processes, describe(gpu.model, plan.destroyed), describe(gpu.model, plan.created)));
  }

  MigChange done;
  for (const auto& instance : plan.destroyed) {
    if (auto s = backend_.destroy_mig_instance(index, instance); !s) return partly_done(s.error(), gpu.model, done);
    done.destroyed.push_back(instance);
  }
  for (const auto& instance : plan.created) {
    if (auto s = backend_.create_mig_instance(index, instance); !s) return partly_done(s.error(), gpu.model, done);
    done.created.push_back(instance);
  }
  spdlog::info("mig layout applied gpu={} uuid=\"{}\" destroyed=\"{}\" created=\"{}\" layout=\"{}\"", index, gpu.uuid,
               describe(gpu.model, done.destroyed), describe(gpu.model, done.created), describe(gpu.model, desired));
  return done;
}

}  // namespace cnlab::agent
