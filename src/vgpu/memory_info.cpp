// One view of memory: cuMemGetInfo, cuDeviceTotalMem and NVML's nvmlDeviceGetMemoryInfo (v1 and v2)
// all answer from memory_view(), so a framework that sizes itself by one and checks with another
// sees the same quota and the same usage. The device's own figures are read first, so free memory
// is never reported above what the device really has free.
#include "vgpu/hooks.h"
#include "vgpu/library.h"

using namespace cnlab::vgpu;
using cu::CUresult;

namespace {

// The tenant's GPU for an NVML device (by its UUID), or -1 when the library does not know it.
int gpu_of_nvml_device(nvml::nvmlDevice_t device, uint64_t device_total) {
  Library& l = lib();
  if (!l.nvml.nvmlDeviceGetUUID) return -1;
  char uuid[nvml::kUuidBufferSize] = {};
  if (l.nvml.nvmlDeviceGetUUID(device, uuid, sizeof uuid) != nvml::NVML_SUCCESS) return -1;
  if (l.config.agent) {
    const LimitsRegion* node = l.limits_file.region;
    return find_gpu(node->gpus, node->gpu_count.load(), uuid);
  }
  int gpu = find_gpu(l.tenant->gpus, l.tenant->gpu_count.load(), uuid);
  return gpu >= 0 ? gpu : find_or_add_gpu(l.tenant, uuid, device_total);
}

// NVML may be called before (or without) any CUDA call: attach then, but never fail NVML for it.
bool ready_for_nvml() { return load_real_nvml() && (attached() || attach()); }

// Rewrites what NVML answered (`r`, into `memory`: v1 or v2) as the tenant's view of the GPU;
// `rewritten` says whether it did (a limit applies to that GPU).
template <typename Memory>
nvml::nvmlReturn_t tenant_view(nvml::nvmlReturn_t r, nvml::nvmlDevice_t device, Memory* memory, bool* rewritten = nullptr) {
  if (r != nvml::NVML_SUCCESS || !memory || !ready_for_nvml()) return r;
  int gpu = gpu_of_nvml_device(device, memory->total);
  if (gpu < 0 || memory_limit(gpu) == kUnlimited) return r;
  MemoryView view = memory_view(gpu, memory->total, memory->free);
  memory->total = view.total;
  memory->free = view.free;
  memory->used = view.total - view.free;
  if (rewritten) *rewritten = true;
  return r;
}

}  // namespace

extern "C" {

CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  CNLAB_VGPU_ENTER();
  Library& l = lib();
  CUresult r = l.cuda.cuMemGetInfo_v2(free, total);
  if (r != cu::CUDA_SUCCESS || !free || !total) return r;
  settle_all_pools();
  MemoryView view = memory_view(current_gpu(), *total, *free);
  *total = view.total;
  *free = view.free;
  return r;
}

CUresult cuDeviceTotalMem_v2(size_t* bytes, cu::CUdevice device) {
  CNLAB_VGPU_ENTER();
  CUresult r = lib().cuda.cuDeviceTotalMem_v2(bytes, device);
  if (r != cu::CUDA_SUCCESS || !bytes) return r;
  *bytes = memory_view(gpu_of_device(device), *bytes, *bytes).total;
  return r;
}

nvml::nvmlReturn_t nvmlDeviceGetMemoryInfo(nvml::nvmlDevice_t device, nvml::nvmlMemory_t* memory) {
  if (!load_real_nvml()) return nvml::NVML_ERROR_UNINITIALIZED;
  return tenant_view(lib().nvml.nvmlDeviceGetMemoryInfo(device, memory), device, memory);
}

nvml::nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvml::nvmlDevice_t device, nvml::nvmlMemory_v2_t* memory) {
  if (!load_real_nvml() || !lib().nvml.nvmlDeviceGetMemoryInfo_v2) return nvml::NVML_ERROR_FUNCTION_NOT_FOUND;
  bool rewritten = false;
  nvml::nvmlReturn_t r = tenant_view(lib().nvml.nvmlDeviceGetMemoryInfo_v2(device, memory), device, memory, &rewritten);
  if (rewritten) memory->reserved = 0;  // the driver's reservation is outside the tenant's quota
  return r;
}

}  // extern "C"
