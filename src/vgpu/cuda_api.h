// Our own declarations of the part of NVIDIA's CUDA driver API (libcuda.so.1) the interception
// library hooks or calls, written from the CUDA 13 driver API reference so that the library builds
// where cuda.h is not installed. Types, constants and signatures follow the real C ABI (x86-64 and
// aarch64 Linux); tests/vgpu/cuda_api_check.cpp compiles them against the real cuda.h where it is
// present and fails on any difference. Only types and function types live here, in a namespace: the
// hooks themselves are defined with C linkage under their ABI names (hooks_*.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace cnlab::vgpu::cu {

using CUresult = int;  // a C enum: an int in registers and in memory
inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
inline constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
inline constexpr CUresult CUDA_ERROR_NOT_INITIALIZED = 3;
inline constexpr CUresult CUDA_ERROR_INVALID_DEVICE = 101;
inline constexpr CUresult CUDA_ERROR_INVALID_CONTEXT = 201;
inline constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;
inline constexpr CUresult CUDA_ERROR_NOT_PERMITTED = 800;
inline constexpr CUresult CUDA_ERROR_NOT_SUPPORTED = 801;
inline constexpr CUresult CUDA_ERROR_UNKNOWN = 999;

using CUdevice = int;
using CUdeviceptr = unsigned long long;
using cuuint64_t = uint64_t;
using CUmemGenericAllocationHandle = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUfunction = struct CUfunc_st*;
using CUarray = struct CUarray_st*;
using CUmipmappedArray = struct CUmipmappedArray_st*;
using CUevent = struct CUevent_st*;
using CUstream = struct CUstream_st*;
using CUmemoryPool = struct CUmemPoolHandle_st*;

inline constexpr size_t CU_IPC_HANDLE_SIZE = 64;
struct CUuuid {
  char bytes[16];
};
struct CUipcMemHandle {
  char reserved[CU_IPC_HANDLE_SIZE];
};
struct CUipcEventHandle {
  char reserved[CU_IPC_HANDLE_SIZE];
};
struct CUmemFabricHandle {
  unsigned char data[CU_IPC_HANDLE_SIZE];
};

using CUarray_format = int;
struct CUDA_ARRAY_DESCRIPTOR {
  size_t Width;
  size_t Height;
  CUarray_format Format;
  unsigned int NumChannels;
};
struct CUDA_ARRAY3D_DESCRIPTOR {
  size_t Width;
  size_t Height;
  size_t Depth;
  CUarray_format Format;
  unsigned int NumChannels;
  unsigned int Flags;
};
struct CUDA_ARRAY_MEMORY_REQUIREMENTS {
  size_t size;
  size_t alignment;
  unsigned int reserved[4];
};

using CUmemAllocationType = int;
using CUmemAllocationHandleType = int;
inline constexpr CUmemAllocationHandleType CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 0x1;
inline constexpr CUmemAllocationHandleType CU_MEM_HANDLE_TYPE_FABRIC = 0x8;
using CUmemLocationType = int;
inline constexpr CUmemLocationType CU_MEM_LOCATION_TYPE_DEVICE = 0x1;
struct CUmemLocation {
  CUmemLocationType type;
  int id;
};
struct CUmemAllocationProp {
  CUmemAllocationType type;
  CUmemAllocationHandleType requestedHandleTypes;
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
};

using CUmemPool_attribute = int;
inline constexpr CUmemPool_attribute CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4;
inline constexpr CUmemPool_attribute CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5;
inline constexpr CUmemPool_attribute CU_MEMPOOL_ATTR_USED_MEM_CURRENT = 7;

struct CUlaunchAttribute;
struct CUlaunchConfig {
  unsigned int gridDimX;
  unsigned int gridDimY;
  unsigned int gridDimZ;
  unsigned int blockDimX;
  unsigned int blockDimY;
  unsigned int blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute* attrs;
  unsigned int numAttrs;
};

using CUdriverProcAddressQueryResult = int;
inline constexpr CUdriverProcAddressQueryResult CU_GET_PROC_ADDRESS_SUCCESS = 0;
inline constexpr CUdriverProcAddressQueryResult CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1;
inline constexpr CUdriverProcAddressQueryResult CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2;
inline constexpr cuuint64_t CU_GET_PROC_ADDRESS_DEFAULT = 0;
inline constexpr cuuint64_t CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1 << 0;
inline constexpr cuuint64_t CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 1 << 1;

// ---- Function types, one per ABI name (the name a driver exports) --------------------------------
// Launch and copy signatures shared by several ABI names.
using LaunchKernelFn = CUresult(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra);
using LaunchKernelExFn = CUresult(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra);
using LaunchCooperativeKernelFn = CUresult(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                           unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                           unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                           void** kernelParams);
using MemcpyFn = CUresult(CUdeviceptr dst, CUdeviceptr src, size_t bytes);
using MemcpyAsyncFn = CUresult(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream);
using MemcpyHtoDFn = CUresult(CUdeviceptr dst, const void* src, size_t bytes);
using MemcpyHtoDAsyncFn = CUresult(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream);
using MemcpyDtoHFn = CUresult(void* dst, CUdeviceptr src, size_t bytes);
using MemcpyDtoHAsyncFn = CUresult(void* dst, CUdeviceptr src, size_t bytes, CUstream stream);
using MemAllocAsyncFn = CUresult(CUdeviceptr* dptr, size_t bytes, CUstream stream);
using MemAllocFromPoolAsyncFn = CUresult(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream stream);
using MemFreeAsyncFn = CUresult(CUdeviceptr dptr, CUstream stream);

using cuInit_t = CUresult(unsigned int flags);
using cuCtxSynchronize_t = CUresult();
using cuCtxSynchronize_v2_t = CUresult(CUcontext ctx);  // CUDA 13
using cuStreamSynchronize_t = CUresult(CUstream stream);
using cuEventSynchronize_t = CUresult(CUevent event);
using cuGetProcAddress_t = CUresult(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags);
using cuGetProcAddress_v2_t = CUresult(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult* symbolStatus);
using cuGetExportTable_t = CUresult(const void** table, const CUuuid* id);
using cuDeviceGet_t = CUresult(CUdevice* device, int ordinal);
using cuDeviceGetCount_t = CUresult(int* count);
using cuDeviceGetUuid_t = CUresult(CUuuid* uuid, CUdevice dev);
using cuDeviceGetUuid_v2_t = CUresult(CUuuid* uuid, CUdevice dev);
using cuDeviceTotalMem_v2_t = CUresult(size_t* bytes, CUdevice dev);
using cuCtxGetDevice_t = CUresult(CUdevice* device);
using cuStreamGetDevice_t = CUresult(CUstream stream, CUdevice* device);
using cuMemGetInfo_v2_t = CUresult(size_t* free, size_t* total);
using cuMemAlloc_v2_t = CUresult(CUdeviceptr* dptr, size_t bytes);
using cuMemAllocPitch_v2_t = CUresult(CUdeviceptr* dptr, size_t* pitch, size_t widthInBytes, size_t height,
                                      unsigned int elementSizeBytes);
using cuMemAllocManaged_t = CUresult(CUdeviceptr* dptr, size_t bytes, unsigned int flags);
using cuMemFree_v2_t = CUresult(CUdeviceptr dptr);
using cuArrayCreate_v2_t = CUresult(CUarray* handle, const CUDA_ARRAY_DESCRIPTOR* desc);
using cuArray3DCreate_v2_t = CUresult(CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc);
using cuArrayDestroy_t = CUresult(CUarray handle);
using cuArrayGetMemoryRequirements_t = CUresult(CUDA_ARRAY_MEMORY_REQUIREMENTS* req, CUarray array, CUdevice device);
using cuMipmappedArrayCreate_t = CUresult(CUmipmappedArray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                          unsigned int levels);
using cuMipmappedArrayDestroy_t = CUresult(CUmipmappedArray handle);
using cuMipmappedArrayGetMemoryRequirements_t = CUresult(CUDA_ARRAY_MEMORY_REQUIREMENTS* req, CUmipmappedArray mipmap,
                                                         CUdevice device);
using cuMemPoolTrimTo_t = CUresult(CUmemoryPool pool, size_t minBytesToKeep);
using cuMemPoolDestroy_t = CUresult(CUmemoryPool pool);
using cuMemPoolGetAttribute_t = CUresult(CUmemoryPool pool, CUmemPool_attribute attr, void* value);
using cuDeviceGetMemPool_t = CUresult(CUmemoryPool* pool, CUdevice dev);
using cuMemCreate_t = CUresult(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                               unsigned long long flags);
using cuMemRelease_t = CUresult(CUmemGenericAllocationHandle handle);
using cuMemMap_t = CUresult(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                            unsigned long long flags);
using cuMemUnmap_t = CUresult(CUdeviceptr ptr, size_t size);
using cuMemExportToShareableHandle_t = CUresult(void* shareableHandle, CUmemGenericAllocationHandle handle,
                                                CUmemAllocationHandleType type, unsigned long long flags);
using cuMemImportFromShareableHandle_t = CUresult(CUmemGenericAllocationHandle* handle, void* osHandle,
                                                  CUmemAllocationHandleType type);
using cuMemGetAllocationPropertiesFromHandle_t = CUresult(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle);
using cuIpcGetMemHandle_t = CUresult(CUipcMemHandle* handle, CUdeviceptr dptr);
using cuIpcOpenMemHandle_v2_t = CUresult(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags);
using cuIpcGetEventHandle_t = CUresult(CUipcEventHandle* handle, CUevent event);
using cuIpcOpenEventHandle_t = CUresult(CUevent* event, CUipcEventHandle handle);

}  // namespace cnlab::vgpu::cu
