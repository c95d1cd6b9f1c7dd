#include "vgpu/library.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "vgpu/proc_address.h"
#include "vgpu/share_control.h"

namespace cnlab::vgpu {
namespace {

pthread_mutex_t g_attach_mutex = PTHREAD_MUTEX_INITIALIZER;
// Recursive: loading a driver runs its constructors, which may call dlsym, which may load.
pthread_mutex_t g_load_mutex = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
std::atomic<bool> g_cuda_loaded{false};
std::atomic<bool> g_nvml_loaded{false};
char g_attach_error[640] = {};

const char* env_lookup(const char* name, void*) { return std::getenv(name); }

// The process's start time in clock ticks since boot (/proc/self/stat field 22): the same number in
// every PID namespace, so the agent can match a slot to a process it sees under another pid.
uint64_t start_ticks() {
  int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buffer[1024];
  ssize_t n = ::read(fd, buffer, sizeof buffer - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buffer[n] = '\0';
  const char* p = std::strrchr(buffer, ')');  // the command may hold spaces and parentheses
  if (!p) return 0;
  // After ") " come fields 3 (state) onwards; starttime is field 22, the 20th from there.
  for (int field = 3; field < 22 && p; ++field) p = std::strchr(p + 1, ' ');
  return p ? std::strtoull(p + 1, nullptr, 10) : 0;
}

bool make_dir(const char* path, mode_t mode) {
  if (::mkdir(path, mode) == 0) {
    (void)::chmod(path, mode);  // the umask must not narrow a shared directory
    return true;
  }
  return errno == EEXIST;
}

void format_uuid(const cu::CUuuid& u, char* out, size_t size) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  std::snprintf(out, size, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

bool refuse(const char* format, const char* a, const char* b = "") {
  std::snprintf(g_attach_error, sizeof g_attach_error, format, a, b);
  log_line(LogLevel::kError, "%s; CUDA calls will fail", g_attach_error);
  return false;
}

void detach_at_exit() {
  Library& l = lib();
  if (l.phase.load() != 2 || l.slot < 0) return;
  stop_share_control();
  release_proc_slot(l.tenant, l.tenant_file.fd, l.slot);
  l.slot = -1;
}

// A forked child is another process: it has no slot and must not charge the parent's. It closes its
// copy of the tenant file's descriptor at once, so that the parent's slot lock (an open file
// description's, region.h) goes with the parent. It attaches again at its first CUDA call.
void reset_in_child() {
  Library& l = lib();
  if (l.tenant_file.region) {
    // Not unmap(): closing the descriptor is harmless here (the child holds no locks), and the
    // mapping may still be read by a thread that forked us mid-call.
    ::close(l.tenant_file.fd);
    l.tenant_file = {};
  }
  if (l.limits_file.region) {
    ::close(l.limits_file.fd);
    l.limits_file = {};
  }
  l.tenant = nullptr;
  l.limits = nullptr;
  l.slot = -1;
  for (auto& d : l.device_gpu) d.store(-1);
  l.only_gpu.store(-1);
  l.phase.store(0);
  pthread_mutex_init(&g_attach_mutex, nullptr);
}

bool do_attach() {
  Library& l = lib();
  if (l.config.error[0]) return refuse("configuration: %s", l.config.error);
  if (!load_real_cuda()) return refuse("%s", g_attach_error[0] ? g_attach_error : "the CUDA driver could not be loaded");

  char tenants_dir[600], path[700];
  std::snprintf(tenants_dir, sizeof tenants_dir, "%s/tenants", l.config.dir);
  std::snprintf(path, sizeof path, "%s/%s", tenants_dir, l.config.tenant);
  if (l.config.agent) {
    RegionError e = open_limits(l.config.region_path, /*writable=*/false, &l.limits_file);
    if (e != RegionError::kOk) return refuse("CNLAB_VGPU_REGION=\"%s\": %s", l.config.region_path, region_error_text(e));
    auto* entry = find_tenant(l.limits_file.region, l.config.tenant);
    if (!entry) return refuse("CNLAB_VGPU_TENANT=\"%s\": %s", l.config.tenant, "the agent has not registered this tenant");
    l.limits = &entry->limits;
    e = open_tenant(path, /*create=*/false, 0, l.config.tenant, &l.tenant_file);
    if (e != RegionError::kOk) return refuse("tenant region \"%s\": %s", path, region_error_text(e));
  } else {
    // Standalone: tenants of any user share the directory, like /tmp (sticky, world-writable).
    if (!make_dir(l.config.dir, 01777) || !make_dir(tenants_dir, 01777)) {
      return refuse("CNLAB_VGPU_DIR=\"%s\": %s", l.config.dir, std::strerror(errno));
    }
    RegionError e = open_tenant(path, /*create=*/true, 0644, l.config.tenant, &l.tenant_file);
    if (e != RegionError::kOk) return refuse("tenant region \"%s\": %s", path, region_error_text(e));
    TenantRegion* t = l.tenant_file.region;
    TenantLimits& s = t->standalone_limits;
    uint32_t expected = 0;
    if (t->standalone_set.compare_exchange_strong(expected, 1)) {
      for (int g = 0; g < kMaxGpus; ++g) {
        s.memory_limit[g].store(l.config.memory_limit);
        s.memory_quota[g].store(l.config.memory_limit);
        s.compute_share[g].store(l.config.compute_share);
        s.launch_interval_ns[g].store(0);
      }
      s.flags.store(l.config.hard_share ? kHardShare : 0);
      t->standalone_set.store(2);
    } else {
      while (t->standalone_set.load() == 1) {
      }
      if (s.memory_limit[0].load() != l.config.memory_limit || s.compute_share[0].load() != l.config.compute_share) {
        log_line(LogLevel::kInfo, "tenant=\"%s\" keeps the limits its first process set (memory_limit=%llu compute_share=%u)",
                 l.config.tenant, static_cast<unsigned long long>(s.memory_limit[0].load()), s.compute_share[0].load());
      }
    }
    l.limits = &s;
  }
  l.tenant = l.tenant_file.region;

  int slot = claim_proc_slot(l.tenant, l.tenant_file.fd, static_cast<int32_t>(::getpid()), start_ticks());
  if (slot < 0 && reap_dead_procs(l.tenant, l.tenant_file.fd, -1) > 0) {
    slot = claim_proc_slot(l.tenant, l.tenant_file.fd, static_cast<int32_t>(::getpid()), start_ticks());
  }
  if (slot < 0) return refuse("tenant=\"%s\": %s", l.config.tenant, "64 of its processes already use CUDA");
  l.slot = slot;
  for (auto& d : l.device_gpu) d.store(-1);
  static bool fork_handler_installed = false;
  if (!fork_handler_installed) {
    fork_handler_installed = true;
    pthread_atfork(nullptr, nullptr, reset_in_child);
  }
  log_line(LogLevel::kInfo, "attached tenant=\"%s\" slot=%d mode=%s", l.config.tenant, slot,
           l.config.agent ? "agent" : "standalone");
  return true;
}

}  // namespace

Library& lib() {
  // Constructed on first use, never destroyed: hooks may run during other objects' destructors.
  alignas(Library) static unsigned char storage[sizeof(Library)];
  static Library* instance = [] {
    auto* l = new (storage) Library;
    l->config = read_config(env_lookup, nullptr);
    log_init(l->config);
    return l;
  }();
  return *instance;
}

// The configuration is read when the library loads (not at the first CUDA call), so that a process
// changing its environment later cannot change its limits.
__attribute__((constructor)) static void read_configuration_at_load() { (void)lib(); }

const char* attach_error() { return g_attach_error; }

bool load_real_cuda() {
  if (g_cuda_loaded.load(std::memory_order_acquire)) return true;
  pthread_mutex_lock(&g_load_mutex);
  Library& l = lib();
  bool ok = g_cuda_loaded.load();
  if (!ok) {
    l.cuda_handle = ::dlopen(l.config.cuda_library, RTLD_NOW | RTLD_GLOBAL);
    if (!l.cuda_handle) {
      std::snprintf(g_attach_error, sizeof g_attach_error, "the CUDA driver \"%s\" could not be loaded: %s",
                    l.config.cuda_library, ::dlerror());
    } else {
#define CNLAB_RESOLVE(abi, ...) l.cuda.abi = reinterpret_cast<decltype(l.cuda.abi)>(real_dlsym(l.cuda_handle, #abi));
      CNLAB_VGPU_CUDA_HOOKS(CNLAB_RESOLVE)
      CNLAB_VGPU_CUDA_CALLS(CNLAB_RESOLVE)
#undef CNLAB_RESOLVE
      if (is_own_function(reinterpret_cast<void*>(l.cuda.cuInit))) {
        std::snprintf(g_attach_error, sizeof g_attach_error,
                      "CNLAB_VGPU_CUDA_LIBRARY=\"%s\" is the interception library itself, not a CUDA driver",
                      l.config.cuda_library);
      } else if (!l.cuda.cuInit || !l.cuda.cuCtxGetDevice) {
        std::snprintf(g_attach_error, sizeof g_attach_error, "\"%s\" is not a CUDA driver (no cuInit)", l.config.cuda_library);
      } else {
        ok = true;
        build_proc_address_index();
        g_cuda_loaded.store(true, std::memory_order_release);
      }
    }
  }
  pthread_mutex_unlock(&g_load_mutex);
  return ok;
}

bool load_real_nvml() {
  if (g_nvml_loaded.load(std::memory_order_acquire)) return true;
  pthread_mutex_lock(&g_load_mutex);
  Library& l = lib();
  if (!g_nvml_loaded.load()) {
    l.nvml_handle = ::dlopen(l.config.nvml_library, RTLD_NOW | RTLD_GLOBAL);
    if (l.nvml_handle) {
#define CNLAB_RESOLVE_NVML(abi, type) l.nvml.abi = reinterpret_cast<nvml::type*>(real_dlsym(l.nvml_handle, #abi));
      CNLAB_VGPU_NVML_HOOKS(CNLAB_RESOLVE_NVML)
#undef CNLAB_RESOLVE_NVML
      l.nvml.nvmlDeviceGetUUID = reinterpret_cast<nvml::nvmlDeviceGetUUID_t*>(real_dlsym(l.nvml_handle, "nvmlDeviceGetUUID"));
      if (is_own_function(reinterpret_cast<void*>(l.nvml.nvmlDeviceGetMemoryInfo))) {
        l.nvml = {};
      } else {
        build_proc_address_index();
        g_nvml_loaded.store(true, std::memory_order_release);
      }
    }
  }
  bool ok = g_nvml_loaded.load();
  pthread_mutex_unlock(&g_load_mutex);
  return ok;
}

bool attach() {
  Library& l = lib();
  int phase = l.phase.load(std::memory_order_acquire);
  if (phase == 2) return true;
  if (phase == 3) return false;
  pthread_mutex_lock(&g_attach_mutex);
  if (l.phase.load() == 0) {
    l.phase.store(1);
    bool ok = do_attach();
    l.phase.store(ok ? 2 : 3, std::memory_order_release);
    if (ok) {
      start_share_control();
      // Registered after the controller has loaded NVML: exit handlers run last-registered first,
      // so ours stops the controller before NVML's own statics are destroyed under it.
      static bool exit_handler_installed = false;
      if (!exit_handler_installed) {
        exit_handler_installed = true;
        std::atexit(detach_at_exit);
      }
    }
  }
  pthread_mutex_unlock(&g_attach_mutex);
  return l.phase.load(std::memory_order_acquire) == 2;
}

int gpu_of_device(cu::CUdevice device) {
  Library& l = lib();
  if (device < 0 || device >= kMaxDevices) return -1;
  int known = l.device_gpu[device].load(std::memory_order_acquire);
  if (known >= 0) return known;
  if (known == -2) return -2;
  cu::CUuuid uuid{};
  cu::CUresult r = l.cuda.cuDeviceGetUuid_v2 ? l.cuda.cuDeviceGetUuid_v2(&uuid, device)
                   : l.cuda.cuDeviceGetUuid   ? l.cuda.cuDeviceGetUuid(&uuid, device)
                                              : cu::CUDA_ERROR_NOT_SUPPORTED;
  if (r != cu::CUDA_SUCCESS) return -1;  // not initialised yet, or no such device: the driver will say
  char text[kUuidSize];
  format_uuid(uuid, text, sizeof text);
  size_t total = 0;
  if (l.cuda.cuDeviceTotalMem_v2) l.cuda.cuDeviceTotalMem_v2(&total, device);
  int gpu;
  if (l.config.agent) {
    const LimitsRegion* node = l.limits_file.region;
    gpu = find_gpu(node->gpus, node->gpu_count.load(), text);
    if (gpu < 0) {
      log_line(LogLevel::kError, "device %d (%s) is not one of the GPUs the agent gave this tenant: its memory is refused", device, text);
    }
  } else {
    gpu = find_or_add_gpu(l.tenant, text, total);
    if (gpu < 0) log_line(LogLevel::kError, "device %d (%s): more than %d GPUs; its memory is refused", device, text, kMaxGpus);
  }
  l.device_gpu[device].store(gpu < 0 ? -2 : gpu, std::memory_order_release);
  int count = 0;
  if (gpu >= 0 && l.cuda.cuDeviceGetCount && l.cuda.cuDeviceGetCount(&count) == cu::CUDA_SUCCESS && count == 1) {
    l.only_gpu.store(gpu, std::memory_order_release);
  }
  return gpu < 0 ? -2 : gpu;
}

int current_gpu() {
  Library& l = lib();
  int only = l.only_gpu.load(std::memory_order_acquire);
  if (only >= 0) return only;
  cu::CUdevice device = 0;
  if (l.cuda.cuCtxGetDevice(&device) != cu::CUDA_SUCCESS) return -1;
  return gpu_of_device(device);
}

bool charge(int gpu, uint64_t bytes, const char* call) {
  Library& l = lib();
  for (int attempt = 0; attempt < 4; ++attempt) {
    if (try_charge(l.tenant, gpu, l.slot, bytes, memory_limit(gpu))) return true;
    if (attempt == 0) {
      // Memory a dead process of the tenant held, or a pool released at a synchronisation, may be
      // counted still: count again before refusing.
      reap_dead_procs(l.tenant, l.tenant_file.fd, l.slot);
      settle_all_pools();
    }
  }
  l.tenant->oom_refusals[gpu].fetch_add(1, std::memory_order_relaxed);
  if (should_log(l.oom_logged)) {
    log_line(LogLevel::kError,
             "refused %s of %llu bytes on GPU %d (%s): tenant \"%s\" holds %llu of its %llu-byte limit",
             call, static_cast<unsigned long long>(bytes), gpu,
             l.config.agent ? l.limits_file.region->gpus[gpu].uuid : l.tenant->gpus[gpu].uuid, l.config.tenant,
             static_cast<unsigned long long>(tenant_usage(l.tenant, gpu)),
             static_cast<unsigned long long>(memory_limit(gpu)));
  }
  return false;
}

void charge_anyway(int gpu, uint64_t bytes) {
  Library& l = lib();
  l.tenant->usage[gpu][l.slot].fetch_add(bytes);
}

void uncharge(int gpu, uint64_t bytes) {
  Library& l = lib();
  cnlab::vgpu::uncharge(l.tenant, gpu, l.slot, bytes);
}

MemoryView memory_view(int gpu, uint64_t device_total, uint64_t device_free) {
  if (gpu < 0) return {device_total, device_free};
  uint64_t limit = memory_limit(gpu);
  if (limit == kUnlimited) return {device_total, device_free};
  uint64_t total = limit < device_total ? limit : device_total;
  uint64_t used = tenant_usage(lib().tenant, gpu);
  uint64_t available = used >= total ? 0 : total - used;
  return {total, available < device_free ? available : device_free};
}

uint64_t now_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace cnlab::vgpu
