#include "agent/gpu/nvml_backend.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <optional>

#include "agent/gpu/device_names.h"
#include "agent/gpu/health.h"
#include "agent/gpu/nvml_api.h"

namespace cnlab::agent {

using namespace nvml;  // NOLINT: the NVML names are long enough already

namespace {

// Without these the backend cannot take an inventory at all.
#define CNLAB_NVML_REQUIRED(X)     \
  X(nvmlInit_v2)                   \
  X(nvmlShutdown)                  \
  X(nvmlErrorString)               \
  X(nvmlDeviceGetCount_v2)         \
  X(nvmlDeviceGetHandleByIndex_v2) \
  X(nvmlDeviceGetUUID)             \
  X(nvmlDeviceGetName)             \
  X(nvmlDeviceGetMemoryInfo)

// Missing ones (an old driver) turn off what they serve: utilization, MIG, ECC, events.
#define CNLAB_NVML_OPTIONAL(X)                      \
  X(nvmlDeviceGetUtilizationRates)                  \
  X(nvmlDeviceGetProcessUtilization)                \
  X(nvmlDeviceGetTotalEccErrors)                    \
  X(nvmlDeviceGetMigMode)                           \
  X(nvmlDeviceGetMaxMigDeviceCount)                 \
  X(nvmlDeviceGetMigDeviceHandleByIndex)            \
  X(nvmlDeviceGetGpuInstanceId)                     \
  X(nvmlDeviceGetGpuInstanceProfileInfo)            \
  X(nvmlDeviceCreateGpuInstanceWithPlacement)       \
  X(nvmlDeviceGetGpuInstances)                      \
  X(nvmlGpuInstanceGetInfo)                         \
  X(nvmlGpuInstanceDestroy)                         \
  X(nvmlGpuInstanceGetComputeInstanceProfileInfo)   \
  X(nvmlGpuInstanceCreateComputeInstance)           \
  X(nvmlGpuInstanceGetComputeInstances)             \
  X(nvmlComputeInstanceDestroy)                     \
  X(nvmlDeviceGetSupportedEventTypes)               \
  X(nvmlEventSetCreate)                             \
  X(nvmlDeviceRegisterEvents)                       \
  X(nvmlEventSetWait_v2)                            \
  X(nvmlEventSetFree)

struct Api {
#define CNLAB_NVML_FIELD(name) decltype(&nvml::name) name = nullptr;
  CNLAB_NVML_REQUIRED(CNLAB_NVML_FIELD)
  CNLAB_NVML_OPTIONAL(CNLAB_NVML_FIELD)
#undef CNLAB_NVML_FIELD
  // nvmlDeviceGetComputeRunningProcesses_v3, or an older version: the agent only asks for the
  // count (a null buffer), which every version answers alike.
  decltype(&nvml::nvmlDeviceGetComputeRunningProcesses_v3) get_compute_processes = nullptr;

  bool mig_queries() const {
    return nvmlDeviceGetMigMode && nvmlDeviceGetGpuInstanceProfileInfo && nvmlDeviceGetGpuInstances &&
           nvmlGpuInstanceGetInfo;
  }
  bool mig_changes() const {
    return mig_queries() && nvmlDeviceCreateGpuInstanceWithPlacement && nvmlGpuInstanceDestroy &&
           nvmlGpuInstanceGetComputeInstanceProfileInfo && nvmlGpuInstanceCreateComputeInstance &&
           nvmlGpuInstanceGetComputeInstances && nvmlComputeInstanceDestroy;
  }
  bool events() const {
    return nvmlEventSetCreate && nvmlDeviceRegisterEvents && nvmlEventSetWait_v2 && nvmlEventSetFree;
  }
};

// The NVML GPU instance profile for a catalog profile, by its shape (compute slices, memory
// slots), so the mapping does not depend on the catalog's order.
std::optional<unsigned> gi_profile_for(const model::MigProfile& p) {
  switch (p.compute_slices * 10 + p.memory_slots) {
    case 11: return NVML_GPU_INSTANCE_PROFILE_1_SLICE;
    case 12: return NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2;
    case 22: return NVML_GPU_INSTANCE_PROFILE_2_SLICE;
    case 34: return NVML_GPU_INSTANCE_PROFILE_3_SLICE;
    case 44: return NVML_GPU_INSTANCE_PROFILE_4_SLICE;
    case 78: return NVML_GPU_INSTANCE_PROFILE_7_SLICE;
    default: return std::nullopt;
  }
}

// The compute instance that spans a GPU instance of `slices` compute slices.
std::optional<unsigned> full_ci_profile_for(int slices) {
  switch (slices) {
    case 1: return NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE;
    case 2: return NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE;
    case 3: return NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE;
    case 4: return NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE;
    case 6: return NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE;
    case 7: return NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE;
    case 8: return NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE;
    default: return std::nullopt;
  }
}

// GPU instance profiles the catalog has no entry for (the +me media-engine variants): instances of
// these, made by someone else, occupy slots the agent would not know about.
constexpr std::array<unsigned, 2> kForeignGiProfiles = {NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1,
                                                        NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1};

constexpr int64_t kMiB = 1024 * 1024;
constexpr unsigned kMaxInstances = 8;  // a GPU holds at most 7 GPU instances

struct GiProfile {
  unsigned id = 0;  // what the create and list calls take
  unsigned instance_count = 0;
};

struct Device {
  nvmlDevice_t handle = nullptr;
  GpuInfo info;
  std::vector<std::optional<GiProfile>> gi_profiles;  // per catalog profile of info.model
  bool ecc_supported = true;
  bool ecc_failure_logged = false;
};

std::string catalog_profile_name(model::ModelId model, int profile) {
  const auto& profiles = model::gpu_model(model).mig_profiles;
  if (profile >= 0 && profile < static_cast<int>(profiles.size())) return std::string(profiles[profile].name);
  return "profile " + std::to_string(profile);
}

std::string instance_name(model::ModelId model, const model::MigInstance& i) {
  return fmt::format("{}@{}", catalog_profile_name(model, i.profile), i.start);
}

}  // namespace

struct NvmlBackend::Impl {
  std::string library;
  void* lib = nullptr;
  Api api;
  bool initialized = false;
  std::string load_error;
  std::vector<Device> devices;
  nvmlEventSet_t events = nullptr;
  mutable std::mutex mu;
  // Per GPU index: when process utilization was last asked for (realtime us; the next asks since).
  std::map<int, unsigned long long> utilization_asked_us;

  ~Impl() {
    if (events && api.nvmlEventSetFree) api.nvmlEventSetFree(events);
    if (initialized) api.nvmlShutdown();
    if (lib) dlclose(lib);
  }

  std::string error_string(nvmlReturn_t r) const {
    const char* s = api.nvmlErrorString ? api.nvmlErrorString(r) : nullptr;
    return fmt::format("{} ({})", s ? s : "unknown NVML error", static_cast<int>(r));
  }

  Error nvml_error(int index, const std::string& what, const char* call, nvmlReturn_t r) const {
    ErrorCode code = (r == NVML_ERROR_INSUFFICIENT_RESOURCES || r == NVML_ERROR_IN_USE || r == NVML_ERROR_NO_PERMISSION)
                         ? ErrorCode::kFailedPrecondition
                         : ErrorCode::kUnavailable;
    return Error::of(code, fmt::format("gpus[{}]", index), what, fmt::format("{} failed: {}", call, error_string(r)));
  }

  // Loads and initializes; on failure sets load_error and leaves no GPUs.
  bool load() {
    lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* why = dlerror();
      load_error = fmt::format("cannot load {}: {}", library, why ? why : "unknown dlopen error");
      return false;
    }
    std::vector<std::string> missing;
#define CNLAB_NVML_LOAD_REQUIRED(name)                              \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(lib, #name)); \
  if (!api.name) missing.emplace_back(#name);
    CNLAB_NVML_REQUIRED(CNLAB_NVML_LOAD_REQUIRED)
#undef CNLAB_NVML_LOAD_REQUIRED
#define CNLAB_NVML_LOAD_OPTIONAL(name) api.name = reinterpret_cast<decltype(api.name)>(dlsym(lib, #name));
    CNLAB_NVML_OPTIONAL(CNLAB_NVML_LOAD_OPTIONAL)
#undef CNLAB_NVML_LOAD_OPTIONAL
    for (const char* name : {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
                             "nvmlDeviceGetComputeRunningProcesses"}) {
      api.get_compute_processes = reinterpret_cast<decltype(api.get_compute_processes)>(dlsym(lib, name));
      if (api.get_compute_processes) break;
    }
    if (!missing.empty()) {
      std::string list;
      for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
      load_error = fmt::format("{} lacks {} (a driver older than NVML 11?)", library, list);
      return false;
    }
    if (nvmlReturn_t r = api.nvmlInit_v2(); r != NVML_SUCCESS) {
      load_error = fmt::format("nvmlInit_v2 failed: {}", error_string(r));
      return false;
    }
    initialized = true;
    unsigned count = 0;
    if (nvmlReturn_t r = api.nvmlDeviceGetCount_v2(&count); r != NVML_SUCCESS) {
      load_error = fmt::format("nvmlDeviceGetCount_v2 failed: {}", error_string(r));
      return false;
    }
    for (unsigned i = 0; i < count; ++i) discover(i);
    register_events();
    return true;
  }

  void discover(unsigned device_index) {
    Device d;
    if (nvmlReturn_t r = api.nvmlDeviceGetHandleByIndex_v2(device_index, &d.handle); r != NVML_SUCCESS) {
      spdlog::warn("gpu skipped backend=nvml device_index={} why=\"nvmlDeviceGetHandleByIndex_v2 failed: {}\"",
                   device_index, error_string(r));
      return;
    }
    char text[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    if (nvmlReturn_t r = api.nvmlDeviceGetUUID(d.handle, text, sizeof text); r != NVML_SUCCESS) {
      spdlog::warn("gpu skipped backend=nvml device_index={} why=\"nvmlDeviceGetUUID failed: {}\"", device_index,
                   error_string(r));
      return;
    }
    d.info.uuid = text;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    if (nvmlReturn_t r = api.nvmlDeviceGetName(d.handle, name, sizeof name); r != NVML_SUCCESS) {
      spdlog::warn("gpu skipped backend=nvml device_index={} uuid=\"{}\" why=\"nvmlDeviceGetName failed: {}\"",
                   device_index, d.info.uuid, error_string(r));
      return;
    }
    d.info.name = name;
    d.info.device_index = static_cast<int>(device_index);

    std::string failure;  // the first query that failed, which makes the GPU unhealthy
    nvmlMemory_t memory{};
    nvmlReturn_t memory_result = api.nvmlDeviceGetMemoryInfo(d.handle, &memory);
    if (memory_result == NVML_SUCCESS) {
      d.info.memory_mib = static_cast<int64_t>(memory.total / kMiB);
    } else {
      failure = fmt::format("nvmlDeviceGetMemoryInfo failed: {}", error_string(memory_result));
    }

    auto model = model_for_device_name(d.info.name, d.info.memory_mib);
    if (!model) {
      // The scheduler could not place work on a model the catalog lacks, so it is not reported.
      spdlog::warn("gpu skipped backend=nvml device_index={} uuid=\"{}\" name=\"{}\" why=\"not a model in the GPU "
                   "catalog; known models: {}\"",
                   device_index, d.info.uuid, d.info.name, model::model_names());
      return;
    }
    d.info.model = *model;
    const model::GpuModel& m = model::gpu_model(*model);
    if (memory_result != NVML_SUCCESS) d.info.memory_mib = m.memory_mib;

    if (api.nvmlDeviceGetMigMode) {
      unsigned current = NVML_DEVICE_MIG_DISABLE, pending = NVML_DEVICE_MIG_DISABLE;
      nvmlReturn_t r = api.nvmlDeviceGetMigMode(d.handle, &current, &pending);
      if (r == NVML_SUCCESS) {
        d.info.mig_enabled = current == NVML_DEVICE_MIG_ENABLE;
      } else if (r != NVML_ERROR_NOT_SUPPORTED && failure.empty()) {
        failure = fmt::format("nvmlDeviceGetMigMode failed: {}", error_string(r));
      }
    }
    if (d.info.mig_enabled && !(m.mig_capable() && api.mig_queries())) {
      spdlog::warn("gpu mig not managed backend=nvml device_index={} uuid=\"{}\" model={} why=\"{}\"", device_index,
                   d.info.uuid, m.name,
                   m.mig_capable() ? "this NVML lacks the GPU instance functions" : "the catalog has no MIG profiles for it");
      d.info.mig_enabled = false;
      if (failure.empty()) failure = "MIG mode is on but the agent cannot manage it";
    }
    if (d.info.mig_enabled) {
      if (auto s = load_gi_profiles(d); !s && failure.empty()) failure = s.error().message;
      if (failure.empty()) {
        auto listed = read_mig_devices_locked(d);
        if (listed) {
          d.info.mig_devices = std::move(*listed);
        } else {
          failure = listed.error().message;
        }
      }
    }

    d.info.index = static_cast<int>(devices.size());
    if (!failure.empty()) {
      d.info.healthy = false;
      d.info.unhealthy_reason = "NvmlQueryFailed";
      spdlog::warn("gpu unhealthy backend=nvml gpu={} device_index={} uuid=\"{}\" reason=\"NvmlQueryFailed\" error=\"{}\"",
                   d.info.index, device_index, d.info.uuid, failure);
    }
    std::string layout;
    for (const auto& md : d.info.mig_devices) layout += (layout.empty() ? "" : ",") + instance_name(d.info.model, md.instance);
    spdlog::info("gpu found backend=nvml gpu={} device_index={} uuid=\"{}\" name=\"{}\" model={} memory_mib={} "
                 "mig={} mig_instances=\"{}\"",
                 d.info.index, device_index, d.info.uuid, d.info.name, m.name, d.info.memory_mib, d.info.mig_enabled,
                 layout);
    devices.push_back(std::move(d));
  }

  Status load_gi_profiles(Device& d) {
    const auto& profiles = model::gpu_model(d.info.model).mig_profiles;
    d.gi_profiles.assign(profiles.size(), std::nullopt);
    for (size_t p = 0; p < profiles.size(); ++p) {
      auto nvml_profile = gi_profile_for(profiles[p]);
      if (!nvml_profile) continue;
      nvmlGpuInstanceProfileInfo_t info{};
      nvmlReturn_t r = api.nvmlDeviceGetGpuInstanceProfileInfo(d.handle, *nvml_profile, &info);
      if (r == NVML_SUCCESS) {
        d.gi_profiles[p] = GiProfile{info.id, info.instanceCount};
      } else if (r != NVML_ERROR_NOT_SUPPORTED && r != NVML_ERROR_INVALID_ARGUMENT) {
        return Error::internal(fmt::format("nvmlDeviceGetGpuInstanceProfileInfo({}) failed: {}", profiles[p].name,
                                           error_string(r)));
      }
    }
    return Status::ok();
  }

  // Lists the GPU instances of one NVML profile id.
  Result<std::vector<nvmlGpuInstance_t>> list_gpu_instances(const Device& d, unsigned profile_id,
                                                           unsigned instance_count) const {
    std::vector<nvmlGpuInstance_t> handles(std::max(instance_count, kMaxInstances), nullptr);
    unsigned count = 0;
    nvmlReturn_t r = api.nvmlDeviceGetGpuInstances(d.handle, profile_id, handles.data(), &count);
    if (r != NVML_SUCCESS) {
      return nvml_error(d.info.index, fmt::format("profile id {}", profile_id), "nvmlDeviceGetGpuInstances", r);
    }
    handles.resize(std::min<size_t>(count, handles.size()));
    return handles;
  }

  Result<std::vector<MigDevice>> read_mig_devices_locked(const Device& d) const {
    std::vector<MigDevice> out;
    if (!d.info.mig_enabled) return out;
    std::map<unsigned, size_t> by_gi_id;  // GPU instance id -> position in out
    for (size_t p = 0; p < d.gi_profiles.size(); ++p) {
      if (!d.gi_profiles[p]) continue;
      auto handles = list_gpu_instances(d, d.gi_profiles[p]->id, d.gi_profiles[p]->instance_count);
      if (!handles) return handles.error();
      for (nvmlGpuInstance_t gi : *handles) {
        nvmlGpuInstanceInfo_t info{};
        if (nvmlReturn_t r = api.nvmlGpuInstanceGetInfo(gi, &info); r != NVML_SUCCESS) {
          return nvml_error(d.info.index, catalog_profile_name(d.info.model, static_cast<int>(p)),
                            "nvmlGpuInstanceGetInfo", r);
        }
        by_gi_id[info.id] = out.size();
        out.push_back({{static_cast<int>(p), static_cast<int>(info.placement.start)}, ""});
      }
    }
    for (unsigned foreign : kForeignGiProfiles) {
      nvmlGpuInstanceProfileInfo_t info{};
      if (api.nvmlDeviceGetGpuInstanceProfileInfo(d.handle, foreign, &info) != NVML_SUCCESS) continue;
      auto handles = list_gpu_instances(d, info.id, info.instanceCount);
      if (handles && !handles->empty()) {
        return Error::failed_precondition(fmt::format(
            "GPU {} (\"{}\") has {} MIG instance(s) of a profile the agent does not manage (NVML profile id {}); "
            "destroy them with nvidia-smi mig -dci and -dgi",
            d.info.index, d.info.uuid, handles->size(), info.id));
      }
    }
    // The UUIDs jobs are given; without them an instance is still reported, with no UUID.
    unsigned max_count = 0;
    if (api.nvmlDeviceGetMaxMigDeviceCount && api.nvmlDeviceGetMigDeviceHandleByIndex &&
        api.nvmlDeviceGetGpuInstanceId && api.nvmlDeviceGetMaxMigDeviceCount(d.handle, &max_count) == NVML_SUCCESS) {
      for (unsigned i = 0; i < max_count; ++i) {
        nvmlDevice_t mig = nullptr;
        unsigned gi_id = 0;
        char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
        if (api.nvmlDeviceGetMigDeviceHandleByIndex(d.handle, i, &mig) != NVML_SUCCESS) continue;
        if (api.nvmlDeviceGetGpuInstanceId(mig, &gi_id) != NVML_SUCCESS) continue;
        if (api.nvmlDeviceGetUUID(mig, uuid, sizeof uuid) != NVML_SUCCESS) continue;
        if (auto it = by_gi_id.find(gi_id); it != by_gi_id.end()) out[it->second].uuid = uuid;
      }
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.instance.start < b.instance.start; });
    return out;
  }

  void register_events() {
    if (!api.events() || devices.empty()) return;
    if (nvmlReturn_t r = api.nvmlEventSetCreate(&events); r != NVML_SUCCESS) {
      events = nullptr;
      spdlog::warn("gpu events unavailable backend=nvml why=\"nvmlEventSetCreate failed: {}\" health=ecc_counters_only",
                   error_string(r));
      return;
    }
    for (const Device& d : devices) {
      unsigned long long wanted = nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError;
      unsigned long long supported = wanted;
      if (api.nvmlDeviceGetSupportedEventTypes &&
          api.nvmlDeviceGetSupportedEventTypes(d.handle, &supported) != NVML_SUCCESS) {
        supported = 0;
      }
      if ((wanted & supported) == 0) continue;
      nvmlReturn_t r = api.nvmlDeviceRegisterEvents(d.handle, wanted & supported, events);
      if (r != NVML_SUCCESS && r != NVML_ERROR_NOT_SUPPORTED) {
        spdlog::warn("gpu events unavailable backend=nvml gpu={} uuid=\"{}\" why=\"nvmlDeviceRegisterEvents failed: {}\"",
                     d.info.index, d.info.uuid, error_string(r));
      }
    }
  }

  Device* find_device(nvmlDevice_t handle) {
    for (Device& d : devices) {
      if (d.handle == handle) return &d;
    }
    return nullptr;
  }

  void mark_unhealthy(Device& d, const std::string& reason, std::vector<HealthEvent>& out) {
    if (!d.info.healthy) return;
    d.info.healthy = false;
    d.info.unhealthy_reason = reason;
    spdlog::warn("gpu unhealthy backend=nvml gpu={} uuid=\"{}\" reason=\"{}\"", d.info.index, d.info.uuid, reason);
    out.push_back({d.info.index, d.info.uuid, reason});
  }

  std::vector<HealthEvent> poll_health_locked() {
    std::vector<HealthEvent> out;
    if (events) {
      // Bounded, so that a storm of events cannot hold the agent's loop.
      for (int i = 0; i < 256; ++i) {
        nvmlEventData_t data{};
        nvmlReturn_t r = api.nvmlEventSetWait_v2(events, &data, 0);
        if (r == NVML_ERROR_TIMEOUT) break;
        if (r != NVML_SUCCESS) {
          spdlog::warn("gpu event wait failed backend=nvml error=\"{}\"", error_string(r));
          break;
        }
        Device* d = find_device(data.device);
        if (!d) continue;  // a device the inventory skipped
        if (data.eventType & nvmlEventTypeXidCriticalError) {
          if (xid_makes_gpu_unhealthy(data.eventData)) {
            mark_unhealthy(*d, xid_reason(data.eventData), out);
          } else {
            spdlog::info("gpu xid ignored backend=nvml gpu={} uuid=\"{}\" xid={} why=\"application error, not a GPU "
                         "fault\"",
                         d->info.index, d->info.uuid, data.eventData);
          }
        }
        if (data.eventType & nvmlEventTypeDoubleBitEccError) mark_unhealthy(*d, kEccUncorrectable, out);
      }
    }
    if (api.nvmlDeviceGetTotalEccErrors) {
      for (Device& d : devices) {
        if (!d.info.healthy || !d.ecc_supported) continue;
        unsigned long long count = 0;
        nvmlReturn_t r =
            api.nvmlDeviceGetTotalEccErrors(d.handle, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &count);
        if (r == NVML_SUCCESS) {
          if (count > 0) mark_unhealthy(d, kEccUncorrectable, out);
        } else if (r == NVML_ERROR_NOT_SUPPORTED) {
          d.ecc_supported = false;  // ECC off or absent (L4, T4 without ECC): nothing to watch
        } else if (!d.ecc_failure_logged) {
          d.ecc_failure_logged = true;
          spdlog::warn("gpu ecc query failed backend=nvml gpu={} uuid=\"{}\" error=\"{}\"", d.info.index, d.info.uuid,
                       error_string(r));
        }
      }
    }
    return out;
  }

  Result<Device*> device(int index) {
    if (index < 0 || index >= static_cast<int>(devices.size())) {
      return Error::not_found("gpu", std::to_string(index),
                              fmt::format("this node has {} GPUs (indices 0..{})", devices.size(),
                                          static_cast<int>(devices.size()) - 1));
    }
    return &devices[index];
  }

  // For create and destroy: the GPU, in MIG mode, with the profile the driver offers.
  Result<GiProfile> mig_target(Device& d, const model::MigInstance& instance) {
    if (!d.info.mig_enabled) {
      return Error::failed_precondition(
          fmt::format("GPU {} (\"{}\") has MIG mode off; no MIG instance can be changed", d.info.index, d.info.uuid));
    }
    if (!api.mig_changes()) {
      return Error::failed_precondition(fmt::format("GPU {} (\"{}\"): this NVML lacks the MIG instance functions",
                                                    d.info.index, d.info.uuid));
    }
    if (instance.profile < 0 || instance.profile >= static_cast<int>(d.gi_profiles.size())) {
      return Error::invalid_argument(fmt::format("gpus[{}]", d.info.index), std::to_string(instance.profile),
                                     fmt::format("{} has {} MIG profiles", model::gpu_model(d.info.model).name,
                                                 d.gi_profiles.size()));
    }
    if (!d.gi_profiles[instance.profile]) {
      return Error::failed_precondition(fmt::format("GPU {} (\"{}\"): the driver does not offer MIG profile {}",
                                                    d.info.index, d.info.uuid,
                                                    catalog_profile_name(d.info.model, instance.profile)));
    }
    return *d.gi_profiles[instance.profile];
  }

  void refresh_mig_devices(Device& d) {
    auto fresh = read_mig_devices_locked(d);
    if (fresh) {
      d.info.mig_devices = std::move(*fresh);
    } else {
      spdlog::warn("gpu mig listing failed backend=nvml gpu={} uuid=\"{}\" error=\"{}\"", d.info.index, d.info.uuid,
                   fresh.error().to_string());
    }
  }

  Status create(Device& d, const model::MigInstance& instance) {
    auto profile = mig_target(d, instance);
    if (!profile) return profile.error();
    const model::MigProfile& p = model::gpu_model(d.info.model).mig_profiles[instance.profile];
    const std::string what = instance_name(d.info.model, instance);

    nvmlGpuInstancePlacement_t placement{static_cast<unsigned>(instance.start), static_cast<unsigned>(p.memory_slots)};
    nvmlGpuInstance_t gi = nullptr;
    if (nvmlReturn_t r = api.nvmlDeviceCreateGpuInstanceWithPlacement(d.handle, profile->id, &placement, &gi);
        r != NVML_SUCCESS) {
      return nvml_error(d.info.index, what, "nvmlDeviceCreateGpuInstanceWithPlacement", r);
    }
    auto ci_profile = full_ci_profile_for(p.compute_slices);
    nvmlComputeInstanceProfileInfo_t ci_info{};
    nvmlComputeInstance_t ci = nullptr;
    nvmlReturn_t r = ci_profile ? api.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                                      gi, *ci_profile, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &ci_info)
                                : NVML_ERROR_NOT_SUPPORTED;
    const char* call = "nvmlGpuInstanceGetComputeInstanceProfileInfo";
    if (r == NVML_SUCCESS) {
      r = api.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id, &ci);
      call = "nvmlGpuInstanceCreateComputeInstance";
    }
    if (r != NVML_SUCCESS) {
      // A GPU instance without a compute instance runs nothing; take it back so the next apply()
      // starts clean.
      if (nvmlReturn_t undo = api.nvmlGpuInstanceDestroy(gi); undo != NVML_SUCCESS) {
        spdlog::warn("gpu mig rollback failed backend=nvml gpu={} instance=\"{}\" error=\"{}\"", d.info.index, what,
                     error_string(undo));
      }
      refresh_mig_devices(d);
      return nvml_error(d.info.index, what, call, r);
    }
    spdlog::info("gpu mig instance created backend=nvml gpu={} uuid=\"{}\" instance=\"{}\"", d.info.index, d.info.uuid,
                 what);
    refresh_mig_devices(d);
    return Status::ok();
  }

  Status destroy(Device& d, const model::MigInstance& instance) {
    auto profile = mig_target(d, instance);
    if (!profile) return profile.error();
    const std::string what = instance_name(d.info.model, instance);
    auto handles = list_gpu_instances(d, profile->id, profile->instance_count);
    if (!handles) return handles.error();
    nvmlGpuInstance_t gi = nullptr;
    for (nvmlGpuInstance_t h : *handles) {
      nvmlGpuInstanceInfo_t info{};
      if (api.nvmlGpuInstanceGetInfo(h, &info) == NVML_SUCCESS && info.placement.start == static_cast<unsigned>(instance.start)) {
        gi = h;
        break;
      }
    }
    if (!gi) {
      return Error::not_found(fmt::format("gpus[{}]", d.info.index), what,
                              fmt::format("GPU {} (\"{}\") has no such MIG instance", d.info.index, d.info.uuid));
    }
    // NVML refuses to destroy a GPU instance that still holds compute instances.
    for (unsigned ci_profile = 0; ci_profile < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; ++ci_profile) {
      nvmlComputeInstanceProfileInfo_t ci_info{};
      if (api.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, ci_profile, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                                                           &ci_info) != NVML_SUCCESS) {
        continue;
      }
      std::vector<nvmlComputeInstance_t> cis(std::max(ci_info.instanceCount, kMaxInstances), nullptr);
      unsigned count = 0;
      if (nvmlReturn_t r = api.nvmlGpuInstanceGetComputeInstances(gi, ci_info.id, cis.data(), &count);
          r != NVML_SUCCESS) {
        return nvml_error(d.info.index, what, "nvmlGpuInstanceGetComputeInstances", r);
      }
      for (unsigned i = 0; i < std::min<size_t>(count, cis.size()); ++i) {
        if (nvmlReturn_t r = api.nvmlComputeInstanceDestroy(cis[i]); r != NVML_SUCCESS) {
          refresh_mig_devices(d);
          return nvml_error(d.info.index, what, "nvmlComputeInstanceDestroy", r);
        }
      }
    }
    if (nvmlReturn_t r = api.nvmlGpuInstanceDestroy(gi); r != NVML_SUCCESS) {
      refresh_mig_devices(d);
      return nvml_error(d.info.index, what, "nvmlGpuInstanceDestroy", r);
    }
    spdlog::info("gpu mig instance destroyed backend=nvml gpu={} uuid=\"{}\" instance=\"{}\"", d.info.index,
                 d.info.uuid, what);
    refresh_mig_devices(d);
    return Status::ok();
  }

  Result<int> processes(const Device& d) const {
    if (!api.get_compute_processes) {
      return Error::of(ErrorCode::kUnavailable, fmt::format("gpus[{}]", d.info.index), d.info.uuid,
                       "this NVML lacks nvmlDeviceGetComputeRunningProcesses");
    }
    unsigned count = 0;
    nvmlReturn_t r = api.get_compute_processes(d.handle, &count, nullptr);
    if (r == NVML_SUCCESS || r == NVML_ERROR_INSUFFICIENT_SIZE) return static_cast<int>(count);
    return nvml_error(d.info.index, d.info.uuid, "nvmlDeviceGetComputeRunningProcesses", r);
  }
};

NvmlBackend::NvmlBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NvmlBackend::~NvmlBackend() = default;

std::unique_ptr<NvmlBackend> NvmlBackend::open(const NvmlOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->library = options.library;
  if (!impl->load()) {
    impl->devices.clear();
    spdlog::warn("gpu backend unavailable backend=nvml library=\"{}\" error=\"{}\" gpus=0", options.library,
                 impl->load_error);
  } else {
    std::lock_guard lock(impl->mu);
    impl->poll_health_locked();  // so the first registration already shows a GPU that has failed
    spdlog::info("gpu backend ready backend=nvml library=\"{}\" gpus={} events={}", options.library,
                 impl->devices.size(), impl->events != nullptr);
  }
  return std::unique_ptr<NvmlBackend>(new NvmlBackend(std::move(impl)));
}

bool NvmlBackend::loaded() const { return impl_->load_error.empty(); }
const std::string& NvmlBackend::load_error() const { return impl_->load_error; }

std::vector<GpuInfo> NvmlBackend::gpus() const {
  std::lock_guard lock(impl_->mu);
  std::vector<GpuInfo> out;
  out.reserve(impl_->devices.size());
  for (const Device& d : impl_->devices) out.push_back(d.info);
  return out;
}

Result<GpuUsage> NvmlBackend::usage(int index) {
  std::lock_guard lock(impl_->mu);
  auto d = impl_->device(index);
  if (!d) return d.error();
  const Device& dev = **d;
  const Api& api = impl_->api;
  nvmlMemory_t memory{};
  if (nvmlReturn_t r = api.nvmlDeviceGetMemoryInfo(dev.handle, &memory); r != NVML_SUCCESS) {
    return impl_->nvml_error(index, dev.info.uuid, "nvmlDeviceGetMemoryInfo", r);
  }
  GpuUsage u;
  u.index = index;
  u.memory_total_mib = static_cast<int64_t>(memory.total / kMiB);
  u.memory_used_mib = static_cast<int64_t>(memory.used / kMiB);
  nvmlUtilization_t utilization{};
  if (api.nvmlDeviceGetUtilizationRates && api.nvmlDeviceGetUtilizationRates(dev.handle, &utilization) == NVML_SUCCESS) {
    u.utilization_percent = static_cast<int>(utilization.gpu);
  }
  if (auto p = impl_->processes(dev)) u.compute_processes = *p;
  return u;
}

std::vector<HealthEvent> NvmlBackend::poll_health() {
  std::lock_guard lock(impl_->mu);
  return impl_->poll_health_locked();
}

Result<std::vector<MigDevice>> NvmlBackend::read_mig_devices(int index) {
  std::lock_guard lock(impl_->mu);
  auto d = impl_->device(index);
  if (!d) return d.error();
  auto fresh = impl_->read_mig_devices_locked(**d);
  if (fresh) (*d)->info.mig_devices = *fresh;
  return fresh;
}

Result<int> NvmlBackend::compute_processes(int index) {
  std::lock_guard lock(impl_->mu);
  auto d = impl_->device(index);
  if (!d) return d.error();
  return impl_->processes(**d);
}

std::vector<ProcessUtilization> NvmlBackend::process_utilization(int index) {
  std::lock_guard lock(impl_->mu);
  std::vector<ProcessUtilization> out;
  auto d = impl_->device(index);
  if (!d || !impl_->api.nvmlDeviceGetProcessUtilization) return out;
  // Every process's samples since the previous call. Not "since the newest sample seen": processes
  // are sampled at different times, so that would skip all but the one sampled last.
  const auto now_us = static_cast<unsigned long long>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  unsigned long long& asked = impl_->utilization_asked_us[index];
  const unsigned long long last_seen = asked != 0 ? asked : now_us - 1'000'000;
  asked = now_us;
  std::vector<nvmlProcessUtilizationSample_t> samples(256);
  unsigned int count = static_cast<unsigned int>(samples.size());
  nvmlReturn_t r = impl_->api.nvmlDeviceGetProcessUtilization((*d)->handle, samples.data(), &count, last_seen);
  if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
    samples.resize(count);
    r = impl_->api.nvmlDeviceGetProcessUtilization((*d)->handle, samples.data(), &count, last_seen);
  }
  if (r != NVML_SUCCESS) return out;
  // Several samples of one process in the window: their mean.
  std::map<unsigned, std::pair<unsigned long long, int>> by_pid;
  for (unsigned i = 0; i < count && i < samples.size(); ++i) {
    auto& [sum, n] = by_pid[samples[i].pid];
    sum += samples[i].smUtil;
    ++n;
  }
  for (const auto& [pid, sum_n] : by_pid) {
    out.push_back({static_cast<int>(pid), static_cast<int>(sum_n.first / static_cast<unsigned long long>(sum_n.second))});
  }
  return out;
}

Status NvmlBackend::create_mig_instance(int index, const model::MigInstance& instance) {
  std::lock_guard lock(impl_->mu);
  auto d = impl_->device(index);
  if (!d) return d.error();
  return impl_->create(**d, instance);
}

Status NvmlBackend::destroy_mig_instance(int index, const model::MigInstance& instance) {
  std::lock_guard lock(impl_->mu);
  auto d = impl_->device(index);
  if (!d) return d.error();
  return impl_->destroy(**d, instance);
}

}  // namespace cnlab::agent
