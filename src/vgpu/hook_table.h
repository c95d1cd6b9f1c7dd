// Every driver entry point the library replaces, in one list: its ABI name (the symbol a driver
// exports and our hook's name), the base name cuGetProcAddress is asked for, the CUDA version that
// introduced this ABI variant (from cudaTypedefs.h's PFN_<name>_v<version>), whether it is the
// per-thread-default-stream variant, and its function type (cuda_api.h).
//
// Every ABI variant of a base name must be listed, the newest included (a test checks it against
// cudaTypedefs.h): cuGetProcAddress's fallback by name picks among these, and must never hand out an
// older variant's hook for a newer variant's signature.
// From this list the library resolves the real driver's functions, answers cuGetProcAddress (any
// version, either stream flavour), and recognises a real function handed out by dlsym so that it
// can hand out the hook instead. Functions not listed (cuGetExportTable among them) are never
// touched: the real pointer passes through.
#pragma once

#include "vgpu/cuda_api.h"

// X(abi_name, base_name, version, per_thread, type)
#define CNLAB_VGPU_CUDA_HOOKS(X)                                                          \
  X(cuInit, cuInit, 2000, 0, cuInit_t)                                                    \
  X(cuGetProcAddress, cuGetProcAddress, 11030, 0, cuGetProcAddress_t)                     \
  X(cuGetProcAddress_v2, cuGetProcAddress, 12000, 0, cuGetProcAddress_v2_t)               \
  X(cuDeviceTotalMem_v2, cuDeviceTotalMem, 3020, 0, cuDeviceTotalMem_v2_t)                \
  X(cuMemGetInfo_v2, cuMemGetInfo, 3020, 0, cuMemGetInfo_v2_t)                            \
  X(cuMemAlloc_v2, cuMemAlloc, 3020, 0, cuMemAlloc_v2_t)                                  \
  X(cuMemAllocPitch_v2, cuMemAllocPitch, 3020, 0, cuMemAllocPitch_v2_t)                   \
  X(cuMemAllocManaged, cuMemAllocManaged, 6000, 0, cuMemAllocManaged_t)                   \
  X(cuMemFree_v2, cuMemFree, 3020, 0, cuMemFree_v2_t)                                     \
  X(cuArrayCreate_v2, cuArrayCreate, 3020, 0, cuArrayCreate_v2_t)                         \
  X(cuArray3DCreate_v2, cuArray3DCreate, 3020, 0, cuArray3DCreate_v2_t)                   \
  X(cuArrayDestroy, cuArrayDestroy, 2000, 0, cuArrayDestroy_t)                            \
  X(cuMipmappedArrayCreate, cuMipmappedArrayCreate, 5000, 0, cuMipmappedArrayCreate_t)    \
  X(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy, 5000, 0, cuMipmappedArrayDestroy_t) \
  X(cuMemAllocAsync, cuMemAllocAsync, 11020, 0, MemAllocAsyncFn)                          \
  X(cuMemAllocAsync_ptsz, cuMemAllocAsync, 11020, 1, MemAllocAsyncFn)                     \
  X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020, 0, MemAllocFromPoolAsyncFn)  \
  X(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync, 11020, 1, MemAllocFromPoolAsyncFn) \
  X(cuMemFreeAsync, cuMemFreeAsync, 11020, 0, MemFreeAsyncFn)                             \
  X(cuMemFreeAsync_ptsz, cuMemFreeAsync, 11020, 1, MemFreeAsyncFn)                        \
  X(cuMemPoolTrimTo, cuMemPoolTrimTo, 11020, 0, cuMemPoolTrimTo_t)                        \
  X(cuMemPoolDestroy, cuMemPoolDestroy, 11020, 0, cuMemPoolDestroy_t)                     \
  X(cuMemCreate, cuMemCreate, 10020, 0, cuMemCreate_t)                                    \
  X(cuMemRelease, cuMemRelease, 10020, 0, cuMemRelease_t)                                 \
  X(cuMemMap, cuMemMap, 10020, 0, cuMemMap_t)                                             \
  X(cuMemUnmap, cuMemUnmap, 10020, 0, cuMemUnmap_t)                                       \
  X(cuMemExportToShareableHandle, cuMemExportToShareableHandle, 10020, 0, cuMemExportToShareableHandle_t) \
  X(cuMemImportFromShareableHandle, cuMemImportFromShareableHandle, 10020, 0, cuMemImportFromShareableHandle_t) \
  X(cuIpcGetMemHandle, cuIpcGetMemHandle, 4010, 0, cuIpcGetMemHandle_t)                   \
  X(cuIpcOpenMemHandle, cuIpcOpenMemHandle, 4010, 0, cuIpcOpenMemHandle_v2_t)             \
  X(cuIpcOpenMemHandle_v2, cuIpcOpenMemHandle, 11000, 0, cuIpcOpenMemHandle_v2_t)         \
  X(cuIpcGetEventHandle, cuIpcGetEventHandle, 4010, 0, cuIpcGetEventHandle_t)             \
  X(cuIpcOpenEventHandle, cuIpcOpenEventHandle, 4010, 0, cuIpcOpenEventHandle_t)          \
  X(cuLaunchKernel, cuLaunchKernel, 4000, 0, LaunchKernelFn)                              \
  X(cuLaunchKernel_ptsz, cuLaunchKernel, 7000, 1, LaunchKernelFn)                         \
  X(cuLaunchKernelEx, cuLaunchKernelEx, 11060, 0, LaunchKernelExFn)                       \
  X(cuLaunchKernelEx_ptsz, cuLaunchKernelEx, 11060, 1, LaunchKernelExFn)                  \
  X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, 9000, 0, LaunchCooperativeKernelFn) \
  X(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel, 9000, 1, LaunchCooperativeKernelFn) \
  X(cuCtxSynchronize, cuCtxSynchronize, 2000, 0, cuCtxSynchronize_t)                      \
  X(cuCtxSynchronize_v2, cuCtxSynchronize, 13000, 0, cuCtxSynchronize_v2_t)               \
  X(cuStreamSynchronize, cuStreamSynchronize, 2000, 0, cuStreamSynchronize_t)             \
  X(cuStreamSynchronize_ptsz, cuStreamSynchronize, 7000, 1, cuStreamSynchronize_t)        \
  X(cuEventSynchronize, cuEventSynchronize, 2000, 0, cuEventSynchronize_t)                \
  X(cuMemcpy, cuMemcpy, 4000, 0, MemcpyFn)                                                \
  X(cuMemcpy_ptds, cuMemcpy, 7000, 1, MemcpyFn)                                           \
  X(cuMemcpyAsync, cuMemcpyAsync, 4000, 0, MemcpyAsyncFn)                                 \
  X(cuMemcpyAsync_ptsz, cuMemcpyAsync, 7000, 1, MemcpyAsyncFn)                            \
  X(cuMemcpyHtoD_v2, cuMemcpyHtoD, 3020, 0, MemcpyHtoDFn)                                 \
  X(cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD, 7000, 1, MemcpyHtoDFn)                            \
  X(cuMemcpyDtoH_v2, cuMemcpyDtoH, 3020, 0, MemcpyDtoHFn)                                 \
  X(cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH, 7000, 1, MemcpyDtoHFn)                            \
  X(cuMemcpyDtoD_v2, cuMemcpyDtoD, 3020, 0, MemcpyFn)                                     \
  X(cuMemcpyDtoD_v2_ptds, cuMemcpyDtoD, 7000, 1, MemcpyFn)                                \
  X(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync, 3020, 0, MemcpyHtoDAsyncFn)                  \
  X(cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync, 7000, 1, MemcpyHtoDAsyncFn)             \
  X(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync, 3020, 0, MemcpyDtoHAsyncFn)                  \
  X(cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync, 7000, 1, MemcpyDtoHAsyncFn)             \
  X(cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync, 3020, 0, MemcpyAsyncFn)                      \
  X(cuMemcpyDtoDAsync_v2_ptsz, cuMemcpyDtoDAsync, 7000, 1, MemcpyAsyncFn)

// Driver functions the library calls but does not replace.
#define CNLAB_VGPU_CUDA_CALLS(X)                                                  \
  X(cuCtxGetDevice, cuCtxGetDevice_t)                                             \
  X(cuDeviceGet, cuDeviceGet_t)                                                   \
  X(cuDeviceGetCount, cuDeviceGetCount_t)                                         \
  X(cuDeviceGetUuid, cuDeviceGetUuid_t)                                           \
  X(cuDeviceGetUuid_v2, cuDeviceGetUuid_v2_t)                                     \
  X(cuStreamGetDevice, cuStreamGetDevice_t)                                       \
  X(cuArrayGetMemoryRequirements, cuArrayGetMemoryRequirements_t)                 \
  X(cuMipmappedArrayGetMemoryRequirements, cuMipmappedArrayGetMemoryRequirements_t) \
  X(cuMemPoolGetAttribute, cuMemPoolGetAttribute_t)                               \
  X(cuDeviceGetMemPool, cuDeviceGetMemPool_t)                                     \
  X(cuMemGetAllocationPropertiesFromHandle, cuMemGetAllocationPropertiesFromHandle_t)

// NVML entry points the library replaces (types in nvml_api.h).
#define CNLAB_VGPU_NVML_HOOKS(X)                          \
  X(nvmlDeviceGetMemoryInfo, nvmlDeviceGetMemoryInfo_t)   \
  X(nvmlDeviceGetMemoryInfo_v2, nvmlDeviceGetMemoryInfo_v2_t)
