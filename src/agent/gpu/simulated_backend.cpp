#include "agent/gpu/simulated_backend.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "agent/gpu/health.h"
#include "common/strings.h"

namespace cnlab::agent {
namespace {

constexpr std::string_view kFlag = "--simulate-gpus";
constexpr std::string_view kExpected = "expected comma-separated <model>x<count> groups, e.g. \"h100x8,l4x2\"";

Error spec_error(std::string_view spec, std::string message) {
  return Error::invalid_argument(std::string(kFlag), std::string(spec), std::move(message));
}

std::string simulatable_models() {
  std::vector<std::string> names;
  for (const auto& m : model::all_models()) {
    if (m.memory_known()) names.emplace_back(m.name);
  }
  return join(names, ", ");
}

std::string mig_capable_models() {
  std::vector<std::string> names;
  for (const auto& m : model::all_models()) {
    if (m.mig_capable()) names.emplace_back(m.name);
  }
  return join(names, ", ");
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// One group, "h100x8" or "a100m80x2:mig"; `spec` is the whole flag value, for the error.
Result<SimulatedGpuGroup> parse_group(std::string_view group, std::string_view spec) {
  SimulatedGpuGroup out;
  std::string_view head = group;
  if (size_t colon = group.find(':'); colon != std::string_view::npos) {
    std::string_view option = group.substr(colon + 1);
    if (to_lower(option) != "mig") {
      return spec_error(spec, fmt::format("unknown option \":{}\" in \"{}\"; the only option is \":mig\"", option,
                                          group));
    }
    out.mig_enabled = true;
    head = group.substr(0, colon);
  }

  // Model names may end in 'x' themselves ("mi300x"), so a whole model name is tried first, then
  // the text before the last 'x'.
  std::string_view model_name = head;
  std::optional<std::string_view> count_text;
  if (!model::find_model(head)) {
    size_t x = head.find_last_of("xX");
    if (x != std::string_view::npos) {
      model_name = head.substr(0, x);
      count_text = head.substr(x + 1);
    }
  }
  auto id = model::find_model(model_name);
  if (!id) {
    return spec_error(spec, fmt::format("unknown GPU model \"{}\" in \"{}\"; known models: {}", model_name, group,
                                        simulatable_models()));
  }
  const model::GpuModel& m = model::gpu_model(*id);
  if (!m.memory_known()) {
    return spec_error(spec, fmt::format("{} cannot be simulated: its memory is undisclosed; known models: {}", m.name,
                                        simulatable_models()));
  }
  out.model = *id;
  if (count_text) {
    if (!all_digits(*count_text) || count_text->size() > 3) {
      return spec_error(spec, fmt::format("count \"{}\" in \"{}\" is not a whole number; {}", *count_text, group,
                                          kExpected));
    }
    out.count = std::stoi(std::string(*count_text));
    if (out.count < 1) {
      return spec_error(spec, fmt::format("count {} in \"{}\" must be 1..{}", out.count, group, kMaxSimulatedGpus));
    }
  }
  if (out.mig_enabled && !m.mig_capable()) {
    return spec_error(spec, fmt::format("{} does not support MIG (\"{}\"); MIG-capable models: {}", m.name, group,
                                        mig_capable_models()));
  }
  return out;
}

std::string read_first_line(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return std::string(trim(line));
}

}  // namespace

Result<std::vector<SimulatedGpuGroup>> parse_simulated_gpus(std::string_view spec) {
  if (trim(spec).empty()) return spec_error(spec, std::string(kExpected));
  std::vector<SimulatedGpuGroup> groups;
  int total = 0;
  auto parts = split(spec, ',');
  for (size_t i = 0; i < parts.size(); ++i) {
    std::string_view group = trim(parts[i]);
    if (group.empty()) return spec_error(spec, fmt::format("group {} is empty; {}", i + 1, kExpected));
    auto parsed = parse_group(group, spec);
    if (!parsed) return parsed.error();
    total += parsed->count;
    if (total > kMaxSimulatedGpus) {
      return spec_error(spec, fmt::format("{} GPUs at most on one node; this asks for more", kMaxSimulatedGpus));
    }
    groups.push_back(*parsed);
  }
  return groups;
}

SimulatedBackend::SimulatedBackend(SimulatedOptions options) : fault_dir_(std::move(options.fault_dir)) {
  int index = 0;
  for (const auto& group : options.groups) {
    const model::GpuModel& m = model::gpu_model(group.model);
    for (int i = 0; i < group.count; ++i, ++index) {
      Gpu gpu(group.model);
      gpu.info.index = index;
      gpu.info.device_index = index;
      gpu.info.uuid = "GPU-" + options.node_name + "-" + std::to_string(index);
      gpu.info.name = "Simulated " + std::string(m.product);
      gpu.info.model = group.model;
      gpu.info.memory_mib = m.memory_mib;
      gpu.info.mig_enabled = group.mig_enabled && m.mig_capable();
      gpu.info.simulated = true;
      gpus_.push_back(std::move(gpu));
    }
  }
  spdlog::info("gpu backend ready backend=simulated gpus={} fault_dir=\"{}\"", gpus_.size(), fault_dir_);
}

Result<std::unique_ptr<SimulatedBackend>> SimulatedBackend::create(std::string node_name, std::string_view spec,
                                                                    std::string fault_dir) {
  auto groups = parse_simulated_gpus(spec);
  if (!groups) return groups.error();
  return std::make_unique<SimulatedBackend>(
      SimulatedOptions{.node_name = std::move(node_name), .groups = std::move(*groups), .fault_dir = std::move(fault_dir)});
}

Status SimulatedBackend::check_index(int index) const {
  if (index >= 0 && index < static_cast<int>(gpus_.size())) return Status::ok();
  return Error::not_found("gpu", std::to_string(index),
                          fmt::format("this node has {} simulated GPUs (indices 0..{})", gpus_.size(),
                                      static_cast<int>(gpus_.size()) - 1));
}

void SimulatedBackend::refresh_mig_devices(Gpu& gpu) {
  std::vector<model::MigInstance> instances = gpu.layout.instances();
  std::sort(instances.begin(), instances.end(), [](const auto& a, const auto& b) { return a.start < b.start; });
  gpu.info.mig_devices.clear();
  for (const auto& instance : instances) {
    gpu.info.mig_devices.push_back(
        {instance, fmt::format("MIG-{}-{}", gpu.info.uuid.substr(4), instance.start)});
  }
}

std::vector<GpuInfo> SimulatedBackend::gpus() const {
  std::lock_guard lock(mu_);
  std::vector<GpuInfo> out;
  out.reserve(gpus_.size());
  for (const auto& g : gpus_) out.push_back(g.info);
  return out;
}

Result<GpuUsage> SimulatedBackend::usage(int index) {
  std::lock_guard lock(mu_);
  if (auto s = check_index(index); !s) return s.error();
  const Gpu& g = gpus_[index];
  return GpuUsage{.index = index,
                  .memory_total_mib = g.info.memory_mib,
                  .memory_used_mib = g.memory_used_mib,
                  .utilization_percent = g.utilization,
                  .compute_processes = g.processes};
}

std::vector<HealthEvent> SimulatedBackend::poll_health() {
  std::lock_guard lock(mu_);
  std::vector<HealthEvent> events;
  for (Gpu& g : gpus_) {
    std::string reason;
    for (const auto& fault : g.pending_faults) {
      if (reason.empty()) reason = fault;
    }
    g.pending_faults.clear();
    if (reason.empty() && !fault_dir_.empty() && g.info.healthy) {
      std::error_code ec;
      auto path = std::filesystem::path(fault_dir_) / fmt::format("gpu{}.fault", g.info.index);
      if (std::filesystem::exists(path, ec)) {
        reason = read_first_line(path);
        if (reason.empty()) reason = "InjectedFault";
      }
    }
    if (reason.empty() || !g.info.healthy) continue;
    g.info.healthy = false;
    g.info.unhealthy_reason = reason;
    spdlog::warn("gpu unhealthy backend=simulated gpu={} uuid=\"{}\" reason=\"{}\"", g.info.index, g.info.uuid,
                 reason);
    events.push_back({g.info.index, g.info.uuid, reason});
  }
  return events;
}

Result<std::vector<MigDevice>> SimulatedBackend::read_mig_devices(int index) {
  std::lock_guard lock(mu_);
  if (auto s = check_index(index); !s) return s.error();
  return gpus_[index].info.mig_devices;
}

Result<int> SimulatedBackend::compute_processes(int index) {
  std::lock_guard lock(mu_);
  if (auto s = check_index(index); !s) return s.error();
  return gpus_[index].processes;
}

Status SimulatedBackend::create_mig_instance(int index, const model::MigInstance& instance) {
  std::lock_guard lock(mu_);
  if (auto s = check_index(index); !s) return s;
  Gpu& g = gpus_[index];
  if (!g.info.mig_enabled) {
    return Error::failed_precondition(
        fmt::format("GPU {} (\"{}\") has MIG mode off; no MIG instance can be created", index, g.info.uuid));
  }
  if (auto s = g.layout.add(instance.profile, instance.start); !s) {
    return Error::invalid_argument(fmt::format("gpu[{}]", index), s.error().value, s.error().message);
  }
  refresh_mig_devices(g);
  return Status::ok();
}

Status SimulatedBackend::destroy_mig_instance(int index, const model::MigInstance& instance) {
  std::lock_guard lock(mu_);
  if (auto s = check_index(index); !s) return s;
  Gpu& g = gpus_[index];
  const auto& instances = g.layout.instances();
  if (std::find(instances.begin(), instances.end(), instance) == instances.end() || !g.layout.remove(instance.start)) {
    return Error::not_found(fmt::format("gpu[{}]", index), std::to_string(instance.start),
                            fmt::format("no MIG instance of profile {} starts at slot {}; the GPU has {}",
                                        instance.profile, instance.start, g.layout.to_string()));
  }
  refresh_mig_devices(g);
  return Status::ok();
}

Status SimulatedBackend::inject_xid(int index, unsigned long long xid) {
  std::lock_guard lock(mu_);
  if (auto s = check_index(index); !s) return s;
  if (xid_makes_gpu_unhealthy(xid)) {
    gpus_[index].pending_faults.push_back(xid_reason(xid));
  } else {
    spdlog::info("gpu xid ignored backend=simulated gpu={} xid={} why=\"application error, not a GPU fault\"", index,
                 xid);
  }
  return Status::ok();
}

Status SimulatedBackend::inject_ecc(int index) {
  std::lock_guard lock(mu_);
  if (auto s = check_index(index); !s) return s;
  gpus_[index].pending_faults.emplace_back(kEccUncorrectable);
  return Status::ok();
}

Status SimulatedBackend::set_compute_processes(int index, int count) {
  std::lock_guard lock(mu_);
  if (auto s = check_index(index); !s) return s;
  gpus_[index].processes = count;
  return Status::ok();
}

Status SimulatedBackend::set_usage(int index, int64_t memory_used_mib, int utilization_percent) {
  std::lock_guard lock(mu_);
  if (auto s = check_index(index); !s) return s;
  gpus_[index].memory_used_mib = memory_used_mib;
  gpus_[index].utilization = utilization_percent;
  return Status::ok();
}

}  // namespace cnlab::agent
