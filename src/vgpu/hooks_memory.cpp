// Device memory the classic way: cuMemAlloc, cuMemAllocPitch, cuMemAllocManaged, cuMemFree, CUDA
// arrays and mipmapped arrays. Each allocation is charged before the driver is asked (so the quota
// is never passed, not even for a moment) and recorded with what it was charged; its free uncharges
// exactly that. A driver that rounds up (a pitch, an array's alignment) is settled afterwards.
#include "vgpu/hooks.h"
#include "vgpu/library.h"

using namespace cnlab::vgpu;
using cu::CUresult;

namespace {

// A GPU that is not one of the tenant's (a device the agent did not give it): nothing is allowed.
CUresult refuse_foreign(const char* call) {
  Library& l = lib();
  if (should_log(l.oom_logged)) log_line(LogLevel::kError, "refused %s: the current device is not one of the tenant's GPUs", call);
  return cu::CUDA_ERROR_OUT_OF_MEMORY;
}

// Settles a charge of `charged` to the `actual` size the driver allocated.
void settle(int gpu, uint64_t charged, uint64_t actual) {
  if (actual > charged) charge_anyway(gpu, actual - charged);
  else if (actual < charged) uncharge(gpu, charged - actual);
}

uint64_t element_bytes(cu::CUarray_format format) {
  switch (format) {
    case 0x01: case 0x08: return 1;             // (un)signed int8
    case 0x02: case 0x09: case 0x10: return 2;  // (un)signed int16, half
    default: return 4;                          // int32, float, and the packed formats' upper bound
  }
}

uint64_t array_bytes(uint64_t width, uint64_t height, uint64_t depth, cu::CUarray_format format, unsigned channels) {
  return width * (height ? height : 1) * (depth ? depth : 1) * element_bytes(format) * (channels ? channels : 1);
}

// The device an array is made for: the current context's.
cu::CUdevice current_device() {
  cu::CUdevice d = 0;
  lib().cuda.cuCtxGetDevice(&d);
  return d;
}

// Allocates through `call` after charging `bytes`; records the result under `kind`.
template <typename Call, typename Handle>
CUresult charged_alloc(const char* name, uint64_t bytes, AllocKind kind, Call call, const Handle* handle) {
  int gpu = current_gpu();
  if (gpu == -2) return refuse_foreign(name);
  if (gpu < 0) return call();  // no current context: the driver gives the error
  if (!charge(gpu, bytes, name)) return cu::CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = call();
  if (r != cu::CUDA_SUCCESS) {
    uncharge(gpu, bytes);
    return r;
  }
  lib().allocations.insert(kind, static_cast<uint64_t>(*handle), {bytes, gpu});
  return r;
}

// Removes `handle`'s record, frees it through `call`, and uncharges it (or puts the record back
// when the driver refused the free). Removing first means a concurrent allocation handed the same
// address right after the driver's free cannot have its new record removed by us.
template <typename Call>
CUresult charged_free(AllocKind kind, uint64_t handle, Call call) {
  AllocInfo info;
  bool known = lib().allocations.remove(kind, handle, &info);
  CUresult r = call();
  if (known) {
    if (r == cu::CUDA_SUCCESS) uncharge(info.gpu, info.bytes);
    else lib().allocations.insert(kind, handle, info);
  }
  return r;
}

// Creates an array (or mipmapped array) through `create` after charging `estimate`, then settles
// the charge to the driver's own figure where it gives one (CUDA 11.6+).
template <typename Handle, typename Create, typename Requirements>
CUresult create_array(const char* name, AllocKind kind, uint64_t estimate, Handle* handle, Create create,
                      Requirements* requirements) {
  uint64_t key = 0;
  CUresult r = charged_alloc(name, estimate, kind, [&] {
    CUresult made = create();
    if (made == cu::CUDA_SUCCESS) key = reinterpret_cast<uint64_t>(*handle);
    return made;
  }, &key);
  AllocInfo info;
  cu::CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
  if (r == cu::CUDA_SUCCESS && requirements && requirements(&req, *handle, current_device()) == cu::CUDA_SUCCESS &&
      lib().allocations.remove(kind, key, &info)) {
    settle(info.gpu, info.bytes, req.size);
    lib().allocations.insert(kind, key, {req.size, info.gpu});
  }
  return r;
}

}  // namespace

extern "C" {

CUresult cuMemAlloc_v2(cu::CUdeviceptr* dptr, size_t bytes) {
  CNLAB_VGPU_ENTER();
  if (!dptr) return lib().cuda.cuMemAlloc_v2(dptr, bytes);
  return charged_alloc("cuMemAlloc", bytes, AllocKind::kDevicePtr, [&] { return lib().cuda.cuMemAlloc_v2(dptr, bytes); },
                       dptr);
}

CUresult cuMemAllocManaged(cu::CUdeviceptr* dptr, size_t bytes, unsigned int flags) {
  CNLAB_VGPU_ENTER();
  if (!dptr) return lib().cuda.cuMemAllocManaged(dptr, bytes, flags);
  return charged_alloc("cuMemAllocManaged", bytes, AllocKind::kDevicePtr,
                       [&] { return lib().cuda.cuMemAllocManaged(dptr, bytes, flags); }, dptr);
}

CUresult cuMemAllocPitch_v2(cu::CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height, unsigned int element) {
  CNLAB_VGPU_ENTER();
  Library& l = lib();
  if (!dptr || !pitch) return l.cuda.cuMemAllocPitch_v2(dptr, pitch, width, height, element);
  // The driver picks the pitch; charge the usual 512-byte rounding first, then what it chose.
  uint64_t estimate = ((uint64_t{width} + 511) / 512) * 512 * height;
  int gpu = current_gpu();
  if (gpu == -2) return refuse_foreign("cuMemAllocPitch");
  if (gpu < 0) return l.cuda.cuMemAllocPitch_v2(dptr, pitch, width, height, element);
  if (!charge(gpu, estimate, "cuMemAllocPitch")) return cu::CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = l.cuda.cuMemAllocPitch_v2(dptr, pitch, width, height, element);
  if (r != cu::CUDA_SUCCESS) {
    uncharge(gpu, estimate);
    return r;
  }
  uint64_t actual = uint64_t{*pitch} * height;
  settle(gpu, estimate, actual);
  l.allocations.insert(AllocKind::kDevicePtr, *dptr, {actual, gpu});
  return r;
}

CUresult cuMemFree_v2(cu::CUdeviceptr dptr) {
  CNLAB_VGPU_ENTER();
  return charged_free(AllocKind::kDevicePtr, dptr, [&] { return lib().cuda.cuMemFree_v2(dptr); });
}

CUresult cuArrayCreate_v2(cu::CUarray* handle, const cu::CUDA_ARRAY_DESCRIPTOR* desc) {
  CNLAB_VGPU_ENTER();
  Library& l = lib();
  if (!handle || !desc) return l.cuda.cuArrayCreate_v2(handle, desc);
  return create_array("cuArrayCreate", AllocKind::kArray, array_bytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels),
                      handle, [&] { return l.cuda.cuArrayCreate_v2(handle, desc); }, l.cuda.cuArrayGetMemoryRequirements);
}

CUresult cuArray3DCreate_v2(cu::CUarray* handle, const cu::CUDA_ARRAY3D_DESCRIPTOR* desc) {
  CNLAB_VGPU_ENTER();
  Library& l = lib();
  if (!handle || !desc) return l.cuda.cuArray3DCreate_v2(handle, desc);
  return create_array("cuArray3DCreate", AllocKind::kArray,
                      array_bytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels), handle,
                      [&] { return l.cuda.cuArray3DCreate_v2(handle, desc); }, l.cuda.cuArrayGetMemoryRequirements);
}

CUresult cuArrayDestroy(cu::CUarray handle) {
  CNLAB_VGPU_ENTER();
  return charged_free(AllocKind::kArray, reinterpret_cast<uint64_t>(handle), [&] { return lib().cuda.cuArrayDestroy(handle); });
}

CUresult cuMipmappedArrayCreate(cu::CUmipmappedArray* handle, const cu::CUDA_ARRAY3D_DESCRIPTOR* desc, unsigned int levels) {
  CNLAB_VGPU_ENTER();
  Library& l = lib();
  if (!handle || !desc) return l.cuda.cuMipmappedArrayCreate(handle, desc, levels);
  uint64_t estimate = 0;
  for (unsigned level = 0; level < levels && level < 64; ++level) {
    uint64_t w = desc->Width >> level, h = desc->Height >> level, d = desc->Depth >> level;
    estimate += array_bytes(w ? w : 1, desc->Height ? (h ? h : 1) : 0, desc->Depth ? (d ? d : 1) : 0, desc->Format,
                            desc->NumChannels);
  }
  return create_array("cuMipmappedArrayCreate", AllocKind::kMipmap, estimate, handle,
                      [&] { return l.cuda.cuMipmappedArrayCreate(handle, desc, levels); },
                      l.cuda.cuMipmappedArrayGetMemoryRequirements);
}

CUresult cuMipmappedArrayDestroy(cu::CUmipmappedArray handle) {
  CNLAB_VGPU_ENTER();
  return charged_free(AllocKind::kMipmap, reinterpret_cast<uint64_t>(handle),
                      [&] { return lib().cuda.cuMipmappedArrayDestroy(handle); });
}

}  // extern "C"
