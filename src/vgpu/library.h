// The interception library's process-wide state and the services every hook uses: the real
// driver's entry points, attaching to the tenant (once, at the first CUDA call), which of the
// tenant's GPUs a device or the current context is, and charging memory against the tenant's limit.
// Private to src/vgpu (the hooks_*.cpp files); the agent uses region.h only.
#pragma once

#include <atomic>
#include <cstdint>

#include "vgpu/alloc_table.h"
#include "vgpu/config.h"
#include "vgpu/hook_table.h"
#include "vgpu/log.h"
#include "vgpu/nvml_api.h"
#include "vgpu/region.h"

namespace cnlab::vgpu {

// The real driver's entry points (null where the driver lacks one).
struct RealCuda {
#define CNLAB_DECLARE_REAL(abi, base, version, per_thread, type) cu::type* abi = nullptr;
  CNLAB_VGPU_CUDA_HOOKS(CNLAB_DECLARE_REAL)
#undef CNLAB_DECLARE_REAL
#define CNLAB_DECLARE_CALL(abi, type) cu::type* abi = nullptr;
  CNLAB_VGPU_CUDA_CALLS(CNLAB_DECLARE_CALL)
#undef CNLAB_DECLARE_CALL
};
struct RealNvml {
#define CNLAB_DECLARE_NVML(abi, type) nvml::type* abi = nullptr;
  CNLAB_VGPU_NVML_HOOKS(CNLAB_DECLARE_NVML)
#undef CNLAB_DECLARE_NVML
  nvml::nvmlDeviceGetUUID_t* nvmlDeviceGetUUID = nullptr;
};

inline constexpr int kMaxDevices = 64;  // CUdevice ordinals a process may see

struct Library {
  Config config;
  RealCuda cuda;
  RealNvml nvml;
  void* cuda_handle = nullptr;
  void* nvml_handle = nullptr;

  // 0 not attached, 1 attaching, 2 ready, 3 refused (config or region unusable: CUDA calls fail).
  std::atomic<int> phase{0};
  Mapped<LimitsRegion> limits_file;
  Mapped<TenantRegion> tenant_file;
  TenantRegion* tenant = nullptr;
  const TenantLimits* limits = nullptr;  // the agent's entry for the tenant, or standalone_limits
  int slot = -1;

  // CUdevice ordinal -> the tenant region's GPU index; -1 not looked up yet, -2 not one of ours.
  std::atomic<int> device_gpu[kMaxDevices];
  // The GPU when the process sees exactly one device (the usual slice): the launch path then
  // needs no driver call to know its GPU. -1 otherwise or not known yet.
  std::atomic<int> only_gpu{-1};

  AllocTable allocations;
  std::atomic<uint64_t> oom_logged{0};
  std::atomic<uint64_t> ipc_logged{0};
};

Library& lib();

// The real driver loaded and its functions resolved (idempotent, thread-safe). False when the driver
// cannot be loaded; the hooks then answer CUDA_ERROR_NOT_INITIALIZED.
bool load_real_cuda();
// NVML loaded (only when a hooked NVML function is first called).
bool load_real_nvml();

// Attaches to the tenant (idempotent, thread-safe): maps the regions, claims a process slot. The
// hot path's check is one acquire load.
inline bool attached() { return lib().phase.load(std::memory_order_acquire) == 2; }
bool attach();
// Why attaching failed (for the hooks' refusal), "" when it did not.
const char* attach_error();

// The tenant region's GPU index for `device`, or -1 when it is not one of the tenant's.
int gpu_of_device(cu::CUdevice device);
// The GPU of the calling thread's current context, or -1 (no context, or not ours).
int current_gpu();

// The tenant's memory limit on `gpu` (kUnlimited when none applies).
inline uint64_t memory_limit(int gpu) {
  return lib().limits->memory_limit[gpu].load(std::memory_order_relaxed);
}

// Charges `bytes` on `gpu` to this process's slot within the tenant's limit. On refusal it reaps
// dead processes of the tenant, settles the stream-ordered pools and retries once before saying no
// (and counting and logging the refusal). Never overshoots the limit.
bool charge(int gpu, uint64_t bytes, const char* call);
// Charges what is already allocated (the driver rounded up, or a pool grew): may pass the limit.
void charge_anyway(int gpu, uint64_t bytes);
void uncharge(int gpu, uint64_t bytes);

// Re-reads every stream-ordered pool this process allocated from and charges its reserved memory
// (pools.cpp). Called on refusals and by cuMemGetInfo.
void settle_all_pools();

// The tenant's view of `gpu`'s memory, given what the device itself reports: total is the limit
// (or the device's memory when smaller, or unlimited), free is what the limit leaves (never more
// than the device has free). cuMemGetInfo, cuDeviceTotalMem and NVML all answer from this.
struct MemoryView {
  uint64_t total;
  uint64_t free;
};
MemoryView memory_view(int gpu, uint64_t device_total, uint64_t device_free);

// Activity counters, this process's slot.
inline void count_launch(int gpu) {
  Library& l = lib();
  l.tenant->launches[gpu][l.slot].fetch_add(1, std::memory_order_relaxed);
}
inline void count_wait(int gpu, uint64_t ns) {
  Library& l = lib();
  l.tenant->waited_ns[gpu][l.slot].fetch_add(ns, std::memory_order_relaxed);
}
inline void count_copy(int gpu) {
  Library& l = lib();
  l.tenant->copies[gpu][l.slot].fetch_add(1, std::memory_order_relaxed);
}

// IPC exports (ipc.cpp). An export is registered in the exporting tenant's region; an opener asks
// who exported a handle: this tenant, another tenant on the node (named in `exporter`, kIdSize
// bytes), or nobody known (a process without this library).
void register_export(uint64_t a, uint64_t b);
enum class ExportOwner { kThisTenant, kOtherTenant, kUnknown };
ExportOwner export_owner(uint64_t a, uint64_t b, char* exporter);
// Logs and counts a refused open of a handle `exporter` exported ("" when unknown).
void refuse_ipc(const char* call, const char* exporter);

// Monotonic nanoseconds.
uint64_t now_ns();

}  // namespace cnlab::vgpu
