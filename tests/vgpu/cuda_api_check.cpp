// Our declarations of the CUDA driver API (src/vgpu/cuda_api.h) and of NVML (src/vgpu/nvml_api.h),
// compiled against the real ones: the toolkit's cuda.h and cudaTypedefs.h, and the agent's NVML
// declarations (src/agent/gpu/nvml_api.h; nvml.h is not installed where CNLab builds). Every check
// is a static_assert: this file does not compile when a struct's size, alignment, a member's offset
// or type, a constant, or a function type's parameters or result differ from the real ones, or when
// hook_table.h names a (base name, version, stream flavour) cudaTypedefs.h does not declare with
// that entry's type. The tests at the end check a few of the same at run time.
//
// Our headers come first, then cuda.h: cuda.h defines macros (cuMemAlloc -> cuMemAlloc_v2,
// CU_IPC_HANDLE_SIZE -> 64) that would rewrite our names if it came first, so after it this file
// spells driver functions only inside token pastes and stringizing, never bare.
#include "vgpu/cuda_api.h"
#include "vgpu/hook_table.h"
#include "vgpu/nvml_api.h"

namespace {
// CU_IPC_HANDLE_SIZE is a macro in cuda.h: read ours while it is still ours.
constexpr size_t kOurIpcHandleSize = cnlab::vgpu::cu::CU_IPC_HANDLE_SIZE;
}  // namespace

#include <cuda.h>
#include <cudaTypedefs.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <utility>

#include "agent/gpu/nvml_api.h"

namespace {

namespace cu = cnlab::vgpu::cu;
namespace vn = cnlab::vgpu::nvml;
namespace an = cnlab::agent::nvml;

// ---- Comparing types across the two sets of declarations ------------------------------------------
// ToReal<T>: our type spelled with the real headers' types (our opaque handles and structs are
// distinct C++ types of the same names in our namespace). Fundamental types pass through.
template <class T>
struct ToReal {
  using type = T;
};
template <class T>
using to_real_t = typename ToReal<T>::type;
template <class T>
struct ToReal<T*> {
  using type = to_real_t<T>*;
};
template <class T>
struct ToReal<const T> {
  using type = const to_real_t<T>;
};
template <class T, size_t N>
struct ToReal<T[N]> {
  using type = to_real_t<T>[N];
};
template <class R, class... A>
struct ToReal<R(A...)> {
  using type = to_real_t<R>(to_real_t<A>...);
};
#define CNLAB_MAP(ours, theirs) \
  template <>                   \
  struct ToReal<ours> {         \
    using type = theirs;        \
  };
CNLAB_MAP(cu::CUctx_st, ::CUctx_st)
CNLAB_MAP(cu::CUfunc_st, ::CUfunc_st)
CNLAB_MAP(cu::CUarray_st, ::CUarray_st)
CNLAB_MAP(cu::CUmipmappedArray_st, ::CUmipmappedArray_st)
CNLAB_MAP(cu::CUevent_st, ::CUevent_st)
CNLAB_MAP(cu::CUstream_st, ::CUstream_st)
CNLAB_MAP(cu::CUmemPoolHandle_st, ::CUmemPoolHandle_st)
CNLAB_MAP(cu::CUuuid, ::CUuuid_st)
CNLAB_MAP(cu::CUipcMemHandle, ::CUipcMemHandle_st)
CNLAB_MAP(cu::CUipcEventHandle, ::CUipcEventHandle_st)
#if CUDA_VERSION >= 12030  // fabric handles are CUDA 12.3's
CNLAB_MAP(cu::CUmemFabricHandle, ::CUmemFabricHandle_st)
#endif
CNLAB_MAP(cu::CUDA_ARRAY_DESCRIPTOR, ::CUDA_ARRAY_DESCRIPTOR_st)
CNLAB_MAP(cu::CUDA_ARRAY3D_DESCRIPTOR, ::CUDA_ARRAY3D_DESCRIPTOR_st)
CNLAB_MAP(cu::CUDA_ARRAY_MEMORY_REQUIREMENTS, ::CUDA_ARRAY_MEMORY_REQUIREMENTS_st)
CNLAB_MAP(cu::CUmemLocation, ::CUmemLocation_st)
CNLAB_MAP(cu::CUmemAllocationProp, ::CUmemAllocationProp_st)
CNLAB_MAP(cu::CUlaunchAttribute, ::CUlaunchAttribute_st)
CNLAB_MAP(cu::CUlaunchConfig, ::CUlaunchConfig_st)
CNLAB_MAP(vn::nvmlDevice_st, an::nvmlDevice_st)
CNLAB_MAP(vn::nvmlMemory_t, an::nvmlMemory_t)
CNLAB_MAP(vn::nvmlProcessUtilizationSample_t, an::nvmlProcessUtilizationSample_t)
#undef CNLAB_MAP

// Canon<T>: a C enum becomes int (our declarations write every C enum as int: the same size and
// passed the same way); everything else stays exactly as it is, through pointers, const, arrays and
// function types. Comparing canonical types therefore fails on any parameter added, removed,
// reordered or changed in size, signedness or indirection.
template <class T, bool = std::is_enum_v<T>>
struct Canon {
  using type = T;
};
template <class T>
using canon_t = typename Canon<T>::type;
template <class T>
struct Canon<T, true> {
  static_assert(sizeof(T) == sizeof(int), "a C enum that is not int-sized");
  using type = std::conditional_t<std::is_const_v<T>, const int, int>;
};
template <class T>
struct Canon<T*, false> {
  using type = canon_t<T>*;
};
template <class T>
struct Canon<const T, false> {
  using type = const canon_t<T>;
};
template <class T, size_t N>
struct Canon<T[N], false> {
  using type = canon_t<T>[N];
};
template <class R, class... A>
struct Canon<R(A...), false> {
  using type = canon_t<R>(canon_t<A>...);
};

template <class Ours, class Theirs>
constexpr bool same_abi = std::is_same_v<canon_t<to_real_t<Ours>>, canon_t<Theirs>>;

// The sanity of the comparison itself: it tells apart what must be told apart.
static_assert(same_abi<int(unsigned int, size_t*), ::CUresult(unsigned int, size_t*)>);
static_assert(!same_abi<int(unsigned int), ::CUresult(unsigned int, size_t*)>);
static_assert(!same_abi<int(unsigned int, size_t), ::CUresult(unsigned int, size_t*)>);
static_assert(!same_abi<int(unsigned int, unsigned int*), ::CUresult(unsigned int, size_t*)>);
static_assert(!same_abi<int(cu::CUstream), ::CUresult(::CUevent)>);
static_assert(same_abi<int(cu::CUstream, const cu::CUuuid*), ::CUresult(::CUstream, const ::CUuuid*)>);

// ---- Types and constants ---------------------------------------------------------------------------
#define CNLAB_SAME_TYPE(ours, theirs) \
  static_assert(same_abi<cu::ours, ::theirs>, "cu::" #ours " is not cuda.h's " #theirs);
CNLAB_SAME_TYPE(CUresult, CUresult)
CNLAB_SAME_TYPE(CUdevice, CUdevice)
CNLAB_SAME_TYPE(CUdeviceptr, CUdeviceptr)
CNLAB_SAME_TYPE(cuuint64_t, cuuint64_t)
CNLAB_SAME_TYPE(CUmemGenericAllocationHandle, CUmemGenericAllocationHandle)
CNLAB_SAME_TYPE(CUcontext, CUcontext)
CNLAB_SAME_TYPE(CUfunction, CUfunction)
CNLAB_SAME_TYPE(CUarray, CUarray)
CNLAB_SAME_TYPE(CUmipmappedArray, CUmipmappedArray)
CNLAB_SAME_TYPE(CUevent, CUevent)
CNLAB_SAME_TYPE(CUstream, CUstream)
CNLAB_SAME_TYPE(CUmemoryPool, CUmemoryPool)
CNLAB_SAME_TYPE(CUarray_format, CUarray_format)
CNLAB_SAME_TYPE(CUmemAllocationType, CUmemAllocationType)
CNLAB_SAME_TYPE(CUmemAllocationHandleType, CUmemAllocationHandleType)
CNLAB_SAME_TYPE(CUmemLocationType, CUmemLocationType)
CNLAB_SAME_TYPE(CUmemPool_attribute, CUmemPool_attribute)
CNLAB_SAME_TYPE(CUdriverProcAddressQueryResult, CUdriverProcAddressQueryResult)
#undef CNLAB_SAME_TYPE

#define CNLAB_SAME_CONSTANT(name)                                                   \
  static_assert(static_cast<long long>(cu::name) == static_cast<long long>(::name), \
                "cu::" #name " is not cuda.h's value");
CNLAB_SAME_CONSTANT(CUDA_SUCCESS)
CNLAB_SAME_CONSTANT(CUDA_ERROR_INVALID_VALUE)
CNLAB_SAME_CONSTANT(CUDA_ERROR_OUT_OF_MEMORY)
CNLAB_SAME_CONSTANT(CUDA_ERROR_NOT_INITIALIZED)
CNLAB_SAME_CONSTANT(CUDA_ERROR_INVALID_DEVICE)
CNLAB_SAME_CONSTANT(CUDA_ERROR_INVALID_CONTEXT)
CNLAB_SAME_CONSTANT(CUDA_ERROR_NOT_FOUND)
CNLAB_SAME_CONSTANT(CUDA_ERROR_NOT_PERMITTED)
CNLAB_SAME_CONSTANT(CUDA_ERROR_NOT_SUPPORTED)
CNLAB_SAME_CONSTANT(CUDA_ERROR_UNKNOWN)
CNLAB_SAME_CONSTANT(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
#if CUDA_VERSION >= 12030
CNLAB_SAME_CONSTANT(CU_MEM_HANDLE_TYPE_FABRIC)
#endif
CNLAB_SAME_CONSTANT(CU_MEM_LOCATION_TYPE_DEVICE)
CNLAB_SAME_CONSTANT(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
CNLAB_SAME_CONSTANT(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
CNLAB_SAME_CONSTANT(CU_MEMPOOL_ATTR_USED_MEM_CURRENT)
CNLAB_SAME_CONSTANT(CU_GET_PROC_ADDRESS_SUCCESS)
CNLAB_SAME_CONSTANT(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)
CNLAB_SAME_CONSTANT(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)
CNLAB_SAME_CONSTANT(CU_GET_PROC_ADDRESS_DEFAULT)
CNLAB_SAME_CONSTANT(CU_GET_PROC_ADDRESS_LEGACY_STREAM)
CNLAB_SAME_CONSTANT(CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
#undef CNLAB_SAME_CONSTANT
static_assert(kOurIpcHandleSize == CU_IPC_HANDLE_SIZE, "cu::CU_IPC_HANDLE_SIZE is not cuda.h's value");

// ---- Structs: size, alignment, and every member's offset and type ---------------------------------
template <class T>
constexpr bool same_layout(size_t size, size_t align) {
  return sizeof(T) == size && alignof(T) == align;
}
#define CNLAB_SAME_STRUCT(ours, theirs)                             \
  static_assert(same_layout<ours>(sizeof(theirs), alignof(theirs)), \
                #ours " differs in size or alignment from " #theirs);
// A member: the same offset and, mapped to the real types, the same type.
#define CNLAB_SAME_MEMBER(ours, theirs, member)                                              \
  static_assert(offsetof(ours, member) == offsetof(theirs, member),                          \
                #ours "." #member " is not at the offset of " #theirs "." #member);          \
  static_assert(same_abi<std::remove_reference_t<decltype(std::declval<ours&>().member)>,    \
                         std::remove_reference_t<decltype(std::declval<theirs&>().member)>>, \
                #ours "." #member " is not of the type of " #theirs "." #member);
// A member of an unnamed struct type (the two types are distinct by definition): offset and size.
#define CNLAB_SAME_MEMBER_LAYOUT(ours, theirs, member)                                              \
  static_assert(offsetof(ours, member) == offsetof(theirs, member) &&                               \
                    sizeof(std::declval<ours&>().member) == sizeof(std::declval<theirs&>().member), \
                #ours "." #member " differs in offset or size from " #theirs "." #member);

CNLAB_SAME_STRUCT(cu::CUuuid, ::CUuuid)
CNLAB_SAME_MEMBER(cu::CUuuid, ::CUuuid, bytes)

CNLAB_SAME_STRUCT(cu::CUipcMemHandle, ::CUipcMemHandle)
CNLAB_SAME_MEMBER(cu::CUipcMemHandle, ::CUipcMemHandle, reserved)

CNLAB_SAME_STRUCT(cu::CUipcEventHandle, ::CUipcEventHandle)
CNLAB_SAME_MEMBER(cu::CUipcEventHandle, ::CUipcEventHandle, reserved)

#if CUDA_VERSION >= 12030
CNLAB_SAME_STRUCT(cu::CUmemFabricHandle, ::CUmemFabricHandle)
CNLAB_SAME_MEMBER(cu::CUmemFabricHandle, ::CUmemFabricHandle, data)
#endif

CNLAB_SAME_STRUCT(cu::CUDA_ARRAY_DESCRIPTOR, ::CUDA_ARRAY_DESCRIPTOR)
CNLAB_SAME_MEMBER(cu::CUDA_ARRAY_DESCRIPTOR, ::CUDA_ARRAY_DESCRIPTOR, Width)
CNLAB_SAME_MEMBER(cu::CUDA_ARRAY_DESCRIPTOR, ::CUDA_ARRAY_DESCRIPTOR, Height)
CNLAB_SAME_MEMBER(cu::CUDA_ARRAY_DESCRIPTOR, ::CUDA_ARRAY_DESCRIPTOR, Format)
CNLAB_SAME_MEMBER(cu::CUDA_ARRAY_DESCRIPTOR, ::CUDA_ARRAY_DESCRIPTOR, NumChannels)

CNLAB_SAME_STRUCT(cu::CUDA_ARRAY3D_DESCRIPTOR, ::CUDA_ARRAY3D_DESCRIPTOR)
CNLAB_SAME_MEMBER(cu::CUDA_ARRAY3D_DESCRIPTOR, ::CUDA_ARRAY3D_DESCRIPTOR, Width)
CNLAB_SAME_MEMBER(cu::CUDA_ARRAY3D_DESCRIPTOR, ::CUDA_ARRAY3D_DESCRIPTOR, Height)
CNLAB_SAME_MEMBER(cu::CUDA_ARRAY3D_DESCRIPTOR, ::CUDA_ARRAY3D_DESCRIPTOR, Depth)
CNLAB_SAME_MEMBER(cu::CUDA_ARRAY3D_DESCRIPTOR, ::CUDA_ARRAY3D_DESCRIPTOR, Format)
CNLAB_SAME_MEMBER(cu::CUDA_ARRAY3D_DESCRIPTOR, ::CUDA_ARRAY3D_DESCRIPTOR, NumChannels)
CNLAB_SAME_MEMBER(cu::CUDA_ARRAY3D_DESCRIPTOR, ::CUDA_ARRAY3D_DESCRIPTOR, Flags)

CNLAB_SAME_STRUCT(cu::CUDA_ARRAY_MEMORY_REQUIREMENTS, ::CUDA_ARRAY_MEMORY_REQUIREMENTS)
CNLAB_SAME_MEMBER(cu::CUDA_ARRAY_MEMORY_REQUIREMENTS, ::CUDA_ARRAY_MEMORY_REQUIREMENTS, size)
CNLAB_SAME_MEMBER(cu::CUDA_ARRAY_MEMORY_REQUIREMENTS, ::CUDA_ARRAY_MEMORY_REQUIREMENTS, alignment)
CNLAB_SAME_MEMBER(cu::CUDA_ARRAY_MEMORY_REQUIREMENTS, ::CUDA_ARRAY_MEMORY_REQUIREMENTS, reserved)

CNLAB_SAME_STRUCT(cu::CUmemLocation, ::CUmemLocation)
CNLAB_SAME_MEMBER(cu::CUmemLocation, ::CUmemLocation, type)
CNLAB_SAME_MEMBER(cu::CUmemLocation, ::CUmemLocation, id)

CNLAB_SAME_STRUCT(cu::CUmemAllocationProp, ::CUmemAllocationProp)
CNLAB_SAME_MEMBER(cu::CUmemAllocationProp, ::CUmemAllocationProp, type)
CNLAB_SAME_MEMBER(cu::CUmemAllocationProp, ::CUmemAllocationProp, requestedHandleTypes)
CNLAB_SAME_MEMBER(cu::CUmemAllocationProp, ::CUmemAllocationProp, location)
CNLAB_SAME_MEMBER(cu::CUmemAllocationProp, ::CUmemAllocationProp, win32HandleMetaData)
CNLAB_SAME_MEMBER_LAYOUT(cu::CUmemAllocationProp, ::CUmemAllocationProp, allocFlags)
CNLAB_SAME_MEMBER(cu::CUmemAllocationProp, ::CUmemAllocationProp, allocFlags.compressionType)
CNLAB_SAME_MEMBER(cu::CUmemAllocationProp, ::CUmemAllocationProp, allocFlags.gpuDirectRDMACapable)
CNLAB_SAME_MEMBER(cu::CUmemAllocationProp, ::CUmemAllocationProp, allocFlags.usage)
CNLAB_SAME_MEMBER(cu::CUmemAllocationProp, ::CUmemAllocationProp, allocFlags.reserved)

CNLAB_SAME_STRUCT(cu::CUlaunchConfig, ::CUlaunchConfig)
CNLAB_SAME_MEMBER(cu::CUlaunchConfig, ::CUlaunchConfig, gridDimX)
CNLAB_SAME_MEMBER(cu::CUlaunchConfig, ::CUlaunchConfig, gridDimY)
CNLAB_SAME_MEMBER(cu::CUlaunchConfig, ::CUlaunchConfig, gridDimZ)
CNLAB_SAME_MEMBER(cu::CUlaunchConfig, ::CUlaunchConfig, blockDimX)
CNLAB_SAME_MEMBER(cu::CUlaunchConfig, ::CUlaunchConfig, blockDimY)
CNLAB_SAME_MEMBER(cu::CUlaunchConfig, ::CUlaunchConfig, blockDimZ)
CNLAB_SAME_MEMBER(cu::CUlaunchConfig, ::CUlaunchConfig, sharedMemBytes)
CNLAB_SAME_MEMBER(cu::CUlaunchConfig, ::CUlaunchConfig, hStream)
CNLAB_SAME_MEMBER(cu::CUlaunchConfig, ::CUlaunchConfig, attrs)
CNLAB_SAME_MEMBER(cu::CUlaunchConfig, ::CUlaunchConfig, numAttrs)

// ---- Function types against cudaTypedefs.h's PFN_<base>_v<version>[_ptsz|_ptds] -------------------
// Every function type in cuda_api.h, against every ABI variant it stands for.
#define CNLAB_SAME_FUNCTION(ours, pfn)                          \
  static_assert(same_abi<cu::ours, std::remove_pointer_t<pfn>>, \
                "cu::" #ours " is not the function type of cudaTypedefs.h's " #pfn);
CNLAB_SAME_FUNCTION(LaunchKernelFn, PFN_cuLaunchKernel_v4000)
CNLAB_SAME_FUNCTION(LaunchKernelFn, PFN_cuLaunchKernel_v7000_ptsz)
CNLAB_SAME_FUNCTION(LaunchKernelExFn, PFN_cuLaunchKernelEx_v11060)
CNLAB_SAME_FUNCTION(LaunchKernelExFn, PFN_cuLaunchKernelEx_v11060_ptsz)
CNLAB_SAME_FUNCTION(LaunchCooperativeKernelFn, PFN_cuLaunchCooperativeKernel_v9000)
CNLAB_SAME_FUNCTION(LaunchCooperativeKernelFn, PFN_cuLaunchCooperativeKernel_v9000_ptsz)
CNLAB_SAME_FUNCTION(MemcpyFn, PFN_cuMemcpy_v4000)
CNLAB_SAME_FUNCTION(MemcpyFn, PFN_cuMemcpy_v7000_ptds)
CNLAB_SAME_FUNCTION(MemcpyFn, PFN_cuMemcpyDtoD_v3020)
CNLAB_SAME_FUNCTION(MemcpyFn, PFN_cuMemcpyDtoD_v7000_ptds)
CNLAB_SAME_FUNCTION(MemcpyAsyncFn, PFN_cuMemcpyAsync_v4000)
CNLAB_SAME_FUNCTION(MemcpyAsyncFn, PFN_cuMemcpyAsync_v7000_ptsz)
CNLAB_SAME_FUNCTION(MemcpyAsyncFn, PFN_cuMemcpyDtoDAsync_v3020)
CNLAB_SAME_FUNCTION(MemcpyAsyncFn, PFN_cuMemcpyDtoDAsync_v7000_ptsz)
CNLAB_SAME_FUNCTION(MemcpyHtoDFn, PFN_cuMemcpyHtoD_v3020)
CNLAB_SAME_FUNCTION(MemcpyHtoDFn, PFN_cuMemcpyHtoD_v7000_ptds)
CNLAB_SAME_FUNCTION(MemcpyHtoDAsyncFn, PFN_cuMemcpyHtoDAsync_v3020)
CNLAB_SAME_FUNCTION(MemcpyHtoDAsyncFn, PFN_cuMemcpyHtoDAsync_v7000_ptsz)
CNLAB_SAME_FUNCTION(MemcpyDtoHFn, PFN_cuMemcpyDtoH_v3020)
CNLAB_SAME_FUNCTION(MemcpyDtoHFn, PFN_cuMemcpyDtoH_v7000_ptds)
CNLAB_SAME_FUNCTION(MemcpyDtoHAsyncFn, PFN_cuMemcpyDtoHAsync_v3020)
CNLAB_SAME_FUNCTION(MemcpyDtoHAsyncFn, PFN_cuMemcpyDtoHAsync_v7000_ptsz)
CNLAB_SAME_FUNCTION(MemAllocAsyncFn, PFN_cuMemAllocAsync_v11020)
CNLAB_SAME_FUNCTION(MemAllocAsyncFn, PFN_cuMemAllocAsync_v11020_ptsz)
CNLAB_SAME_FUNCTION(MemAllocFromPoolAsyncFn, PFN_cuMemAllocFromPoolAsync_v11020)
CNLAB_SAME_FUNCTION(MemAllocFromPoolAsyncFn, PFN_cuMemAllocFromPoolAsync_v11020_ptsz)
CNLAB_SAME_FUNCTION(MemFreeAsyncFn, PFN_cuMemFreeAsync_v11020)
CNLAB_SAME_FUNCTION(MemFreeAsyncFn, PFN_cuMemFreeAsync_v11020_ptsz)
CNLAB_SAME_FUNCTION(cuInit_t, PFN_cuInit_v2000)
CNLAB_SAME_FUNCTION(cuCtxSynchronize_t, PFN_cuCtxSynchronize_v2000)
CNLAB_SAME_FUNCTION(cuCtxSynchronize_v2_t, PFN_cuCtxSynchronize_v13000)
CNLAB_SAME_FUNCTION(cuStreamSynchronize_t, PFN_cuStreamSynchronize_v2000)
CNLAB_SAME_FUNCTION(cuStreamSynchronize_t, PFN_cuStreamSynchronize_v7000_ptsz)
CNLAB_SAME_FUNCTION(cuEventSynchronize_t, PFN_cuEventSynchronize_v2000)
CNLAB_SAME_FUNCTION(cuGetProcAddress_t, PFN_cuGetProcAddress_v11030)
CNLAB_SAME_FUNCTION(cuGetProcAddress_v2_t, PFN_cuGetProcAddress_v12000)
CNLAB_SAME_FUNCTION(cuGetExportTable_t, PFN_cuGetExportTable_v3000)
CNLAB_SAME_FUNCTION(cuDeviceGet_t, PFN_cuDeviceGet_v2000)
CNLAB_SAME_FUNCTION(cuDeviceGetCount_t, PFN_cuDeviceGetCount_v2000)
CNLAB_SAME_FUNCTION(cuDeviceGetUuid_t, PFN_cuDeviceGetUuid_v9020)
CNLAB_SAME_FUNCTION(cuDeviceGetUuid_v2_t, PFN_cuDeviceGetUuid_v11040)
CNLAB_SAME_FUNCTION(cuDeviceTotalMem_v2_t, PFN_cuDeviceTotalMem_v3020)
CNLAB_SAME_FUNCTION(cuCtxGetDevice_t, PFN_cuCtxGetDevice_v2000)  // the exported cuCtxGetDevice, not v13000's
#if CUDA_VERSION >= 12080                                        // cuStreamGetDevice is CUDA 12.8's
CNLAB_SAME_FUNCTION(cuStreamGetDevice_t, PFN_cuStreamGetDevice_v12080)
#endif
CNLAB_SAME_FUNCTION(cuMemGetInfo_v2_t, PFN_cuMemGetInfo_v3020)
CNLAB_SAME_FUNCTION(cuMemAlloc_v2_t, PFN_cuMemAlloc_v3020)
CNLAB_SAME_FUNCTION(cuMemAllocPitch_v2_t, PFN_cuMemAllocPitch_v3020)
CNLAB_SAME_FUNCTION(cuMemAllocManaged_t, PFN_cuMemAllocManaged_v6000)
CNLAB_SAME_FUNCTION(cuMemFree_v2_t, PFN_cuMemFree_v3020)
CNLAB_SAME_FUNCTION(cuArrayCreate_v2_t, PFN_cuArrayCreate_v3020)
CNLAB_SAME_FUNCTION(cuArray3DCreate_v2_t, PFN_cuArray3DCreate_v3020)
CNLAB_SAME_FUNCTION(cuArrayDestroy_t, PFN_cuArrayDestroy_v2000)
CNLAB_SAME_FUNCTION(cuArrayGetMemoryRequirements_t, PFN_cuArrayGetMemoryRequirements_v11060)
CNLAB_SAME_FUNCTION(cuMipmappedArrayCreate_t, PFN_cuMipmappedArrayCreate_v5000)
CNLAB_SAME_FUNCTION(cuMipmappedArrayDestroy_t, PFN_cuMipmappedArrayDestroy_v5000)
CNLAB_SAME_FUNCTION(cuMipmappedArrayGetMemoryRequirements_t, PFN_cuMipmappedArrayGetMemoryRequirements_v11060)
CNLAB_SAME_FUNCTION(cuMemPoolTrimTo_t, PFN_cuMemPoolTrimTo_v11020)
CNLAB_SAME_FUNCTION(cuMemPoolDestroy_t, PFN_cuMemPoolDestroy_v11020)
CNLAB_SAME_FUNCTION(cuMemPoolGetAttribute_t, PFN_cuMemPoolGetAttribute_v11020)
CNLAB_SAME_FUNCTION(cuDeviceGetMemPool_t, PFN_cuDeviceGetMemPool_v11020)
CNLAB_SAME_FUNCTION(cuMemCreate_t, PFN_cuMemCreate_v10020)
CNLAB_SAME_FUNCTION(cuMemRelease_t, PFN_cuMemRelease_v10020)
CNLAB_SAME_FUNCTION(cuMemMap_t, PFN_cuMemMap_v10020)
CNLAB_SAME_FUNCTION(cuMemUnmap_t, PFN_cuMemUnmap_v10020)
CNLAB_SAME_FUNCTION(cuMemExportToShareableHandle_t, PFN_cuMemExportToShareableHandle_v10020)
CNLAB_SAME_FUNCTION(cuMemImportFromShareableHandle_t, PFN_cuMemImportFromShareableHandle_v10020)
CNLAB_SAME_FUNCTION(cuMemGetAllocationPropertiesFromHandle_t, PFN_cuMemGetAllocationPropertiesFromHandle_v10020)
CNLAB_SAME_FUNCTION(cuIpcGetMemHandle_t, PFN_cuIpcGetMemHandle_v4010)
CNLAB_SAME_FUNCTION(cuIpcOpenMemHandle_v2_t, PFN_cuIpcOpenMemHandle_v11000)
CNLAB_SAME_FUNCTION(cuIpcGetEventHandle_t, PFN_cuIpcGetEventHandle_v4010)
CNLAB_SAME_FUNCTION(cuIpcOpenEventHandle_t, PFN_cuIpcOpenEventHandle_v4010)
#undef CNLAB_SAME_FUNCTION

// ---- hook_table.h: every replaced entry point names a real ABI variant, with that variant's type ---
// cudaTypedefs.h declares PFN_cuIpcOpenMemHandle_v4010 (the exported cuIpcOpenMemHandle) only for
// the driver's own build (__CUDA_API_VERSION_INTERNAL): here as it is there, v11000's signature.
#if !defined(__CUDA_API_VERSION_INTERNAL)
typedef CUresult(CUDAAPI* PFN_cuIpcOpenMemHandle_v4010)(CUdeviceptr_v2* pdptr, CUipcMemHandle_v1 handle,
                                                        unsigned int Flags);
#endif

// The per-thread-stream variants: cudaTypedefs.h suffixes them _ptsz or _ptds, as the ABI names are.
#define CNLAB_PER_THREAD(abi, base_name, introduced, suffix_name)             \
  struct PerThread_##abi {                                                    \
    using function_pointer = PFN_##base_name##_v##introduced##_##suffix_name; \
    static constexpr std::string_view base = #base_name;                      \
    static constexpr int version = introduced;                                \
    static constexpr std::string_view suffix = "_" #suffix_name;              \
  };
CNLAB_PER_THREAD(cuMemAllocAsync_ptsz, cuMemAllocAsync, 11020, ptsz)
CNLAB_PER_THREAD(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync, 11020, ptsz)
CNLAB_PER_THREAD(cuMemFreeAsync_ptsz, cuMemFreeAsync, 11020, ptsz)
CNLAB_PER_THREAD(cuLaunchKernel_ptsz, cuLaunchKernel, 7000, ptsz)
CNLAB_PER_THREAD(cuStreamSynchronize_ptsz, cuStreamSynchronize, 7000, ptsz)
CNLAB_PER_THREAD(cuLaunchKernelEx_ptsz, cuLaunchKernelEx, 11060, ptsz)
CNLAB_PER_THREAD(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel, 9000, ptsz)
CNLAB_PER_THREAD(cuMemcpy_ptds, cuMemcpy, 7000, ptds)
CNLAB_PER_THREAD(cuMemcpyAsync_ptsz, cuMemcpyAsync, 7000, ptsz)
CNLAB_PER_THREAD(cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD, 7000, ptds)
CNLAB_PER_THREAD(cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH, 7000, ptds)
CNLAB_PER_THREAD(cuMemcpyDtoD_v2_ptds, cuMemcpyDtoD, 7000, ptds)
CNLAB_PER_THREAD(cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync, 7000, ptsz)
CNLAB_PER_THREAD(cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync, 7000, ptsz)
CNLAB_PER_THREAD(cuMemcpyDtoDAsync_v2_ptsz, cuMemcpyDtoDAsync, 7000, ptsz)
#undef CNLAB_PER_THREAD

// Each entry's names reach the checks only pasted or stringized, so cuda.h's macros never rewrite
// them. A default-stream entry is checked against PFN_<base>_v<version>; a per-thread one against
// its PerThread_<abi> above (which must exist: a new per-thread hook needs a line there).
#define CNLAB_CHECK_HOOK(abi, base, version, per_thread, type) \
  CNLAB_CHECK_HOOK_##per_thread(#abi, #base, version, PFN_##base##_v##version, PerThread_##abi, type)
#define CNLAB_CHECK_HOOK_0(abi, base, version, pfn, per_thread, type) \
  static_assert(same_abi<cu::type, std::remove_pointer_t<pfn>>,       \
                "hook_table.h: " abi " is not of the type of cudaTypedefs.h's " #pfn);
#define CNLAB_CHECK_HOOK_1(abi, base_name, introduced, pfn, per_thread, type)            \
  static_assert(same_abi<cu::type, std::remove_pointer_t<per_thread::function_pointer>>, \
                "hook_table.h: " abi " is not of the type of its per-thread PFN");       \
  static_assert(per_thread::base == base_name && per_thread::version == introduced &&    \
                    std::string_view(abi).ends_with(per_thread::suffix),                 \
                "hook_table.h: " abi " does not name the base, version and suffix of its per-thread PFN");
CNLAB_VGPU_CUDA_HOOKS(CNLAB_CHECK_HOOK)
#undef CNLAB_CHECK_HOOK
#undef CNLAB_CHECK_HOOK_0
#undef CNLAB_CHECK_HOOK_1

// ---- NVML: ours against the agent's fuller declarations --------------------------------------------
static_assert(same_abi<vn::nvmlReturn_t, an::nvmlReturn_t>);
static_assert(vn::NVML_SUCCESS == an::NVML_SUCCESS);
static_assert(vn::NVML_ERROR_UNINITIALIZED == an::NVML_ERROR_UNINITIALIZED);
static_assert(vn::NVML_ERROR_INVALID_ARGUMENT == an::NVML_ERROR_INVALID_ARGUMENT);
static_assert(vn::NVML_ERROR_NOT_SUPPORTED == an::NVML_ERROR_NOT_SUPPORTED);
static_assert(vn::NVML_ERROR_FUNCTION_NOT_FOUND == an::NVML_ERROR_FUNCTION_NOT_FOUND);
static_assert(vn::kUuidBufferSize == an::NVML_DEVICE_UUID_V2_BUFFER_SIZE);
static_assert(same_abi<vn::nvmlDevice_t, an::nvmlDevice_t>);

CNLAB_SAME_STRUCT(vn::nvmlMemory_t, an::nvmlMemory_t)
CNLAB_SAME_MEMBER(vn::nvmlMemory_t, an::nvmlMemory_t, total)
CNLAB_SAME_MEMBER(vn::nvmlMemory_t, an::nvmlMemory_t, free)
CNLAB_SAME_MEMBER(vn::nvmlMemory_t, an::nvmlMemory_t, used)

CNLAB_SAME_STRUCT(vn::nvmlProcessUtilizationSample_t, an::nvmlProcessUtilizationSample_t)
CNLAB_SAME_MEMBER(vn::nvmlProcessUtilizationSample_t, an::nvmlProcessUtilizationSample_t, pid)
CNLAB_SAME_MEMBER(vn::nvmlProcessUtilizationSample_t, an::nvmlProcessUtilizationSample_t, timeStamp)
CNLAB_SAME_MEMBER(vn::nvmlProcessUtilizationSample_t, an::nvmlProcessUtilizationSample_t, smUtil)
CNLAB_SAME_MEMBER(vn::nvmlProcessUtilizationSample_t, an::nvmlProcessUtilizationSample_t, memUtil)
CNLAB_SAME_MEMBER(vn::nvmlProcessUtilizationSample_t, an::nvmlProcessUtilizationSample_t, encUtil)
CNLAB_SAME_MEMBER(vn::nvmlProcessUtilizationSample_t, an::nvmlProcessUtilizationSample_t, decUtil)

#define CNLAB_SAME_NVML_FUNCTION(ours, theirs) \
  static_assert(same_abi<vn::ours, decltype(an::theirs)>, "nvml::" #ours " is not the type of the agent's " #theirs);
CNLAB_SAME_NVML_FUNCTION(nvmlInit_v2_t, nvmlInit_v2)
CNLAB_SAME_NVML_FUNCTION(nvmlDeviceGetUUID_t, nvmlDeviceGetUUID)
CNLAB_SAME_NVML_FUNCTION(nvmlDeviceGetMemoryInfo_t, nvmlDeviceGetMemoryInfo)
CNLAB_SAME_NVML_FUNCTION(nvmlDeviceGetProcessUtilization_t, nvmlDeviceGetProcessUtilization)
#undef CNLAB_SAME_NVML_FUNCTION

// The agent does not declare nvmlMemory_v2_t: its layout and version word as NVML's public header
// has them (nvmlMemory_v2 = NVML_STRUCT_VERSION(Memory, 2) = 0x02000028 on LP64).
static_assert(sizeof(vn::nvmlMemory_v2_t) == 40 && alignof(vn::nvmlMemory_v2_t) == 8);
static_assert(offsetof(vn::nvmlMemory_v2_t, version) == 0 && offsetof(vn::nvmlMemory_v2_t, total) == 8 &&
              offsetof(vn::nvmlMemory_v2_t, reserved) == 16 && offsetof(vn::nvmlMemory_v2_t, free) == 24 &&
              offsetof(vn::nvmlMemory_v2_t, used) == 32);
static_assert(vn::kMemoryV2Version == 0x02000028u);
static_assert(same_abi<vn::nvmlDeviceGetMemoryInfo_v2_t, an::nvmlReturn_t(an::nvmlDevice_t, vn::nvmlMemory_v2_t*)>);
static_assert(same_abi<vn::nvmlDeviceGetHandleByUUID_t, an::nvmlReturn_t(const char*, an::nvmlDevice_t*)>);

#undef CNLAB_SAME_STRUCT
#undef CNLAB_SAME_MEMBER
#undef CNLAB_SAME_MEMBER_LAYOUT

}  // namespace

// The declarations are checked above, as the file compiles. At run time: what a hook writes into a
// caller's struct through our declaration is what the caller reads through cuda.h's.
TEST(VgpuCudaApi, StructsWrittenThroughOurDeclarationsReadTheSameThroughCudaH) {
  cu::CUmemAllocationProp ours{};
  ours.type = 1;
  ours.requestedHandleTypes = cu::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  ours.location = {cu::CU_MEM_LOCATION_TYPE_DEVICE, 3};
  ours.allocFlags.gpuDirectRDMACapable = 1;
  ours.allocFlags.usage = 0x2;
  ::CUmemAllocationProp theirs;
  std::memcpy(&theirs, &ours, sizeof theirs);
  EXPECT_EQ(theirs.type, CU_MEM_ALLOCATION_TYPE_PINNED);
  EXPECT_EQ(theirs.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  EXPECT_EQ(theirs.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
  EXPECT_EQ(theirs.location.id, 3);
  EXPECT_EQ(theirs.allocFlags.gpuDirectRDMACapable, 1);
  EXPECT_EQ(theirs.allocFlags.usage, 0x2);

  cu::CUlaunchConfig launch{};
  launch.sharedMemBytes = 4096;
  launch.hStream = reinterpret_cast<cu::CUstream>(0x1234);
  launch.numAttrs = 2;
  ::CUlaunchConfig real;
  std::memcpy(&real, &launch, sizeof real);
  EXPECT_EQ(real.sharedMemBytes, 4096u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(real.hStream), 0x1234u);
  EXPECT_EQ(real.numAttrs, 2u);
}

TEST(VgpuCudaApi, RefusalsReachCallersAsCudaHsErrorCodes) {
  // What the library returns past a quota and on a cross-tenant IPC handle.
  EXPECT_EQ(cu::CUDA_ERROR_OUT_OF_MEMORY, static_cast<int>(CUDA_ERROR_OUT_OF_MEMORY));
  EXPECT_EQ(cu::CUDA_ERROR_NOT_PERMITTED, static_cast<int>(CUDA_ERROR_NOT_PERMITTED));
  EXPECT_EQ(cu::CUDA_ERROR_NOT_PERMITTED, 800);
}
