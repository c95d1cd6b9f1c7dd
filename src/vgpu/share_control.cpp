#include "vgpu/share_control.h"

#include <dirent.h>
#include <pthread.h>
#include <time.h>

#include <cstdio>
#include <cstring>

#include "vgpu/library.h"
#include "vgpu/proc_address.h"
#include "vgpu/share_controller.h"

namespace cnlab::vgpu {
namespace {

// The control period. NVML samples a GPU's processes sparsely (on an H200 with driver 580, a
// busy process went without a sample for up to 0.8 s while another was sampled), so a shorter
// period often sees no sample, or only one tenant's, and takes the GPU for idle or for one
// tenant's alone. A second holds several samples of each of a few busy processes.
constexpr uint64_t kPeriodNs = 1'000'000'000;
// The thread wakes this often, so that a process's exit never waits a whole period for it.
constexpr uint64_t kTickNs = 100'000'000;
constexpr int kMaxSamples = 1024;

struct Nvml {
  nvml::nvmlInit_v2_t* init = nullptr;
  nvml::nvmlDeviceGetHandleByUUID_t* by_uuid = nullptr;
  nvml::nvmlDeviceGetProcessUtilization_t* utilization = nullptr;
};

// Another tenant's region, kept mapped between periods (re-listed every second).
// Counters of a tenant on one GPU as last read, for this period's differences.
struct Last {
  uint64_t launches = 0, waited = 0, paced = 0;
};

struct Known {
  char name[kIdSize] = {};
  Mapped<TenantRegion> region;
  Last last[kMaxGpus] = {};
  bool seen = false;
};

struct Controller {
  pthread_t thread{};
  std::atomic<bool> running{false};
  std::atomic<bool> stop{false};
  Nvml nvml;
  Known known[kMaxTenants];
  Last mine[kMaxGpus] = {};
  unsigned long long asked_us[kMaxGpus] = {};  // when NVML was last asked, per GPU (realtime us)
  nvml::nvmlProcessUtilizationSample_t samples[kMaxSamples];
};
Controller g_controller;

uint64_t sum_of(const std::atomic<uint64_t> (&per_proc)[kMaxProcs]) {
  uint64_t sum = 0;
  for (const auto& v : per_proc) sum += v.load(std::memory_order_relaxed);
  return sum;
}

unsigned long long realtime_us() {  // NVML stamps its samples with the wall clock
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<unsigned long long>(ts.tv_sec) * 1000000ull + static_cast<unsigned long long>(ts.tv_nsec) / 1000;
}

uint64_t since(uint64_t now, uint64_t& last) {
  uint64_t d = now >= last ? now - last : 0;
  last = now;
  return d;
}

// Whether `pid` is one of `t`'s live processes (standalone runs in the host's PID namespace).
bool owns_pid(const TenantRegion* t, unsigned pid) {
  uint64_t active = t->active_procs.load();
  while (active) {
    int slot = __builtin_ctzll(active);
    active &= active - 1;
    if (static_cast<unsigned>(t->procs[slot].pid.load()) == pid) return true;
  }
  return false;
}

void refresh_known(Controller& c) {
  Library& l = lib();
  for (Known& k : c.known) k.seen = false;
  char dir[600];
  std::snprintf(dir, sizeof dir, "%s/tenants", l.config.dir);
  DIR* d = ::opendir(dir);
  if (!d) return;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.' || std::strcmp(e->d_name, l.config.tenant) == 0) continue;
    Known* slot = nullptr;
    for (Known& k : c.known) {
      if (k.region && std::strncmp(k.name, e->d_name, kIdSize) == 0) slot = &k;
    }
    if (!slot) {
      for (Known& k : c.known) {
        if (!k.region) {
          slot = &k;
          break;
        }
      }
      if (!slot) break;
      char path[900];
      std::snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      if (open_tenant_readonly(path, &slot->region) != RegionError::kOk) continue;
      std::snprintf(slot->name, sizeof slot->name, "%s", e->d_name);
      for (auto& l : slot->last) l = Last{};
    }
    slot->seen = true;
  }
  ::closedir(d);
  for (Known& k : c.known) {
    if (k.region && !k.seen) unmap(&k.region);  // its file is gone: the tenant ended
  }
}

void control_gpu(Controller& c, int gpu) {
  Library& l = lib();
  TenantRegion* me = l.tenant;
  const char* uuid = me->gpus[gpu].uuid;
  nvml::nvmlDevice_t device = nullptr;
  if (c.nvml.by_uuid(uuid, &device) != nvml::NVML_SUCCESS) return;
  // Every process's samples since the previous period (each process's mean over them). Not "since
  // the newest sample seen": processes are sampled at different times, so that would skip every
  // process but the one sampled last.
  const unsigned long long now_us = realtime_us();
  if (c.asked_us[gpu] == 0) c.asked_us[gpu] = now_us - kPeriodNs / 1000;
  unsigned int count = kMaxSamples;
  if (c.nvml.utilization(device, c.samples, &count, c.asked_us[gpu]) != nvml::NVML_SUCCESS) count = 0;
  c.asked_us[gpu] = now_us;

  ShareInput inputs[kMaxTenants + 1];
  int gpu_of[kMaxTenants + 1];
  const TenantRegion* regions[kMaxTenants + 1];
  Last* last[kMaxTenants + 1];
  size_t n = 0;
  regions[n] = me;
  gpu_of[n] = gpu;
  last[n] = &c.mine[gpu];
  ++n;
  for (Known& k : c.known) {
    if (!k.region) continue;
    int g = find_gpu(k.region.region->gpus, k.region.region->gpu_count.load(), uuid);
    if (g < 0) continue;
    regions[n] = k.region.region;
    gpu_of[n] = g;
    last[n] = &k.last[g];
    ++n;
  }
  for (size_t i = 0; i < n; ++i) {
    const TenantRegion* t = regions[i];
    const TenantLimits& limits = t->standalone_limits;
    int g = gpu_of[i];
    ShareInput& in = inputs[i];
    in.share = limits.compute_share[g].load() / 100.0;
    in.hard = (limits.flags.load() & kHardShare) != 0;
    in.launches = since(sum_of(t->launches[g]), last[i]->launches);
    in.waiting = static_cast<double>(since(sum_of(t->waited_ns[g]), last[i]->waited)) / kPeriodNs;
    in.paced = static_cast<double>(since(t->paced_ns[g].load(), last[i]->paced)) / kPeriodNs;
    in.interval_ns = limits.launch_interval_ns[g].load();
    double busy = 0;
    for (unsigned s = 0; s < count; ++s) {
      if (owns_pid(t, c.samples[s].pid)) busy += c.samples[s].smUtil / 100.0;
    }
    in.busy = busy > 1 ? 1 : busy;
  }
  uint64_t intervals[kMaxTenants + 1];
  next_intervals(inputs, n, kPeriodNs, intervals);
  me->standalone_limits.launch_interval_ns[gpu].store(intervals[0], std::memory_order_relaxed);
  if (lib().config.log_level >= LogLevel::kDebug) {
    double others = 0;
    for (size_t i = 1; i < n; ++i) others += inputs[i].busy;
    log_line(LogLevel::kDebug,
             "compute share gpu=%d samples=%u busy=%.3f others=%.3f launches=%llu waiting=%.3f paced=%.3f interval_ns=%llu",
             gpu, count, inputs[0].busy, others, static_cast<unsigned long long>(inputs[0].launches), inputs[0].waiting,
             inputs[0].paced, static_cast<unsigned long long>(intervals[0]));
  }
}

void* run(void*) {
  Controller& c = g_controller;
  Library& l = lib();
  bool holder = false;
  for (uint64_t tick = 1; !c.stop.load(); ++tick) {
    timespec ts{0, static_cast<long>(kTickNs)};
    ::nanosleep(&ts, nullptr);
    if (tick % (kPeriodNs / kTickNs) != 0) continue;
    if (!holder) holder = try_lock_controller(l.tenant_file.fd);
    if (!holder) continue;
    refresh_known(c);
    uint32_t gpus = l.tenant->gpu_count.load();
    for (uint32_t g = 0; g < gpus && g < static_cast<uint32_t>(kMaxGpus); ++g) {
      if (l.tenant->gpus[g].state.load() == 2) control_gpu(c, static_cast<int>(g));
    }
  }
  return nullptr;
}

}  // namespace

void start_share_control() {
  Library& l = lib();
  if (l.config.agent || (l.limits->compute_share[0].load() >= 100 && !(l.limits->flags.load() & kHardShare))) return;
  Controller& c = g_controller;
  if (c.running.load() || !load_real_nvml()) {
    if (!c.running.load()) {
      log_line(LogLevel::kError, "compute share %u%% asked for, but NVML (%s) is not available: launches are not paced",
               l.limits->compute_share[0].load(), l.config.nvml_library);
    }
    return;
  }
  c.nvml.init = reinterpret_cast<nvml::nvmlInit_v2_t*>(real_dlsym(l.nvml_handle, "nvmlInit_v2"));
  c.nvml.by_uuid = reinterpret_cast<nvml::nvmlDeviceGetHandleByUUID_t*>(real_dlsym(l.nvml_handle, "nvmlDeviceGetHandleByUUID"));
  c.nvml.utilization =
      reinterpret_cast<nvml::nvmlDeviceGetProcessUtilization_t*>(real_dlsym(l.nvml_handle, "nvmlDeviceGetProcessUtilization"));
  if (!c.nvml.init || !c.nvml.by_uuid || !c.nvml.utilization || c.nvml.init() != nvml::NVML_SUCCESS) {
    log_line(LogLevel::kError, "compute share: NVML lacks process utilization: launches are not paced");
    return;
  }
  c.stop.store(false);
  if (pthread_create(&c.thread, nullptr, run, nullptr) == 0) {
    c.running.store(true);
    log_line(LogLevel::kInfo, "compute share %u%%%s: controller started", l.limits->compute_share[0].load(),
             (l.limits->flags.load() & kHardShare) ? " (hard)" : "");
  }
}

void stop_share_control() {
  Controller& c = g_controller;
  if (!c.running.exchange(false)) return;
  c.stop.store(true);
  pthread_join(c.thread, nullptr);
}

}  // namespace cnlab::vgpu
