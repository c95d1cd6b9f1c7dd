// Part of the TEST DOUBLE of libcuda.so.1 (see fake_cuda.cpp): cuGetProcAddress, the one table of
// every function the fake exports, and cuGetExportTable.
//
// cuGetProcAddress(symbol, pfn, cudaVersion, flags[, status]) resolves a base name ("cuMemAlloc", no
// ABI suffix) as the real driver does: the newest ABI variant whose introducing version is <=
// cudaVersion; with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM the _ptsz/_ptds variant where one
// exists (and is not older than the plain one). An unknown name: CUDA_ERROR_NOT_FOUND with
// CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND; a name whose every variant is newer than cudaVersion:
// CUDA_ERROR_NOT_FOUND with CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT. It works before cuInit, as
// the real one does (the CUDA runtime looks up cuInit through it).
//
// The introducing versions are those of cudaTypedefs.h's PFN_<name>_v<version>[_ptsz|_ptds]
// typedefs, and each entry is checked against its typedef at compile time: ENTRY(cuMemAlloc, 3020,
// cuMemAlloc_v2) does not compile unless cuMemAlloc_v2 has exactly PFN_cuMemAlloc_v3020's type.
// Every variant the header lists for a base name is in the table (a newer request never gets an
// older ABI).
#include <cstring>

#include <cudaTypedefs.h>

#include "fake_cuda_internal.h"

namespace cnlab::fake_cuda {
namespace {

struct ProcEntry {
  const char* name;  // base name
  int version;       // CUDA version that introduced this ABI variant
  bool per_thread;   // a _ptsz/_ptds variant
  void* (*address)();
};

template <typename Pfn, Pfn F>
void* address_of() {
  return reinterpret_cast<void*>(F);
}

#define ENTRY(base, version, fn) {#base, version, false, &address_of<PFN_##base##_v##version, &fn>}
#define ENTRY_PT(base, version, suffix, fn) \
  {#base, version, true, &address_of<PFN_##base##_v##version##_##suffix, &fn>}

constexpr ProcEntry kProcTable[] = {
    // initialisation, devices, errors
    ENTRY(cuInit, 2000, cuInit),
    ENTRY(cuDriverGetVersion, 2020, cuDriverGetVersion),
    ENTRY(cuDeviceGetCount, 2000, cuDeviceGetCount),
    ENTRY(cuDeviceGet, 2000, cuDeviceGet),
    ENTRY(cuDeviceGetName, 2000, cuDeviceGetName),
    ENTRY(cuDeviceGetUuid, 9020, cuDeviceGetUuid),
    ENTRY(cuDeviceGetUuid, 11040, cuDeviceGetUuid_v2),
    ENTRY(cuDeviceTotalMem, 2000, cuDeviceTotalMem),
    ENTRY(cuDeviceTotalMem, 3020, cuDeviceTotalMem_v2),
    ENTRY(cuDeviceGetAttribute, 2000, cuDeviceGetAttribute),
    ENTRY(cuDeviceGetPCIBusId, 4010, cuDeviceGetPCIBusId),
    ENTRY(cuGetErrorName, 6000, cuGetErrorName),
    ENTRY(cuGetErrorString, 6000, cuGetErrorString),
    ENTRY(cuGetProcAddress, 11030, cuGetProcAddress),
    ENTRY(cuGetProcAddress, 12000, cuGetProcAddress_v2),
    ENTRY(cuGetExportTable, 3000, cuGetExportTable),
    // primary contexts
    ENTRY(cuDevicePrimaryCtxRetain, 7000, cuDevicePrimaryCtxRetain),
    ENTRY(cuDevicePrimaryCtxRelease, 7000, cuDevicePrimaryCtxRelease),
    ENTRY(cuDevicePrimaryCtxRelease, 11000, cuDevicePrimaryCtxRelease_v2),
    ENTRY(cuDevicePrimaryCtxReset, 7000, cuDevicePrimaryCtxReset),
    ENTRY(cuDevicePrimaryCtxReset, 11000, cuDevicePrimaryCtxReset_v2),
    ENTRY(cuDevicePrimaryCtxGetState, 7000, cuDevicePrimaryCtxGetState),
    ENTRY(cuDevicePrimaryCtxSetFlags, 7000, cuDevicePrimaryCtxSetFlags),
    ENTRY(cuDevicePrimaryCtxSetFlags, 11000, cuDevicePrimaryCtxSetFlags_v2),
    // contexts
    ENTRY(cuCtxCreate, 2000, cuCtxCreate),
    ENTRY(cuCtxCreate, 3020, cuCtxCreate_v2),
    ENTRY(cuCtxCreate, 11040, cuCtxCreate_v3),
    ENTRY(cuCtxCreate, 12050, cuCtxCreate_v4),
    ENTRY(cuCtxDestroy, 2000, cuCtxDestroy),
    ENTRY(cuCtxDestroy, 4000, cuCtxDestroy_v2),
    ENTRY(cuCtxSetCurrent, 4000, cuCtxSetCurrent),
    ENTRY(cuCtxGetCurrent, 4000, cuCtxGetCurrent),
    ENTRY(cuCtxPushCurrent, 2000, cuCtxPushCurrent),
    ENTRY(cuCtxPushCurrent, 4000, cuCtxPushCurrent_v2),
    ENTRY(cuCtxPopCurrent, 2000, cuCtxPopCurrent),
    ENTRY(cuCtxPopCurrent, 4000, cuCtxPopCurrent_v2),
    ENTRY(cuCtxGetDevice, 2000, cuCtxGetDevice),
    ENTRY(cuCtxGetDevice, 13000, cuCtxGetDevice_v2),
    ENTRY(cuCtxSynchronize, 2000, cuCtxSynchronize),
    ENTRY(cuCtxSynchronize, 13000, cuCtxSynchronize_v2),
    ENTRY(cuCtxGetStreamPriorityRange, 5050, cuCtxGetStreamPriorityRange),
    // memory
    ENTRY(cuMemAlloc, 2000, cuMemAlloc),
    ENTRY(cuMemAlloc, 3020, cuMemAlloc_v2),
    ENTRY(cuMemAllocPitch, 2000, cuMemAllocPitch),
    ENTRY(cuMemAllocPitch, 3020, cuMemAllocPitch_v2),
    ENTRY(cuMemAllocManaged, 6000, cuMemAllocManaged),
    ENTRY(cuMemFree, 2000, cuMemFree),
    ENTRY(cuMemFree, 3020, cuMemFree_v2),
    ENTRY(cuMemGetInfo, 2000, cuMemGetInfo),
    ENTRY(cuMemGetInfo, 3020, cuMemGetInfo_v2),
    ENTRY(cuMemGetAddressRange, 2000, cuMemGetAddressRange),
    ENTRY(cuMemGetAddressRange, 3020, cuMemGetAddressRange_v2),
    ENTRY(cuMemcpyHtoD, 2000, cuMemcpyHtoD),
    ENTRY(cuMemcpyHtoD, 3020, cuMemcpyHtoD_v2),
    ENTRY_PT(cuMemcpyHtoD, 7000, ptds, cuMemcpyHtoD_v2_ptds),
    ENTRY(cuMemcpyDtoH, 2000, cuMemcpyDtoH),
    ENTRY(cuMemcpyDtoH, 3020, cuMemcpyDtoH_v2),
    ENTRY_PT(cuMemcpyDtoH, 7000, ptds, cuMemcpyDtoH_v2_ptds),
    ENTRY(cuMemcpyDtoD, 2000, cuMemcpyDtoD),
    ENTRY(cuMemcpyDtoD, 3020, cuMemcpyDtoD_v2),
    ENTRY_PT(cuMemcpyDtoD, 7000, ptds, cuMemcpyDtoD_v2_ptds),
    ENTRY(cuMemcpy, 4000, cuMemcpy),
    ENTRY_PT(cuMemcpy, 7000, ptds, cuMemcpy_ptds),
    ENTRY(cuMemcpyAsync, 4000, cuMemcpyAsync),
    ENTRY_PT(cuMemcpyAsync, 7000, ptsz, cuMemcpyAsync_ptsz),
    ENTRY(cuMemcpyHtoDAsync, 2000, cuMemcpyHtoDAsync),
    ENTRY(cuMemcpyHtoDAsync, 3020, cuMemcpyHtoDAsync_v2),
    ENTRY_PT(cuMemcpyHtoDAsync, 7000, ptsz, cuMemcpyHtoDAsync_v2_ptsz),
    ENTRY(cuMemcpyDtoHAsync, 2000, cuMemcpyDtoHAsync),
    ENTRY(cuMemcpyDtoHAsync, 3020, cuMemcpyDtoHAsync_v2),
    ENTRY_PT(cuMemcpyDtoHAsync, 7000, ptsz, cuMemcpyDtoHAsync_v2_ptsz),
    ENTRY(cuMemcpyDtoDAsync, 3000, cuMemcpyDtoDAsync),
    ENTRY(cuMemcpyDtoDAsync, 3020, cuMemcpyDtoDAsync_v2),
    ENTRY_PT(cuMemcpyDtoDAsync, 7000, ptsz, cuMemcpyDtoDAsync_v2_ptsz),
    ENTRY(cuMemsetD8, 2000, cuMemsetD8),
    ENTRY(cuMemsetD8, 3020, cuMemsetD8_v2),
    ENTRY_PT(cuMemsetD8, 7000, ptds, cuMemsetD8_v2_ptds),
    ENTRY(cuMemsetD8Async, 3020, cuMemsetD8Async),
    ENTRY_PT(cuMemsetD8Async, 7000, ptsz, cuMemsetD8Async_ptsz),
    ENTRY(cuMemsetD32, 2000, cuMemsetD32),
    ENTRY(cuMemsetD32, 3020, cuMemsetD32_v2),
    ENTRY_PT(cuMemsetD32, 7000, ptds, cuMemsetD32_v2_ptds),
    ENTRY(cuMemsetD32Async, 3020, cuMemsetD32Async),
    ENTRY_PT(cuMemsetD32Async, 7000, ptsz, cuMemsetD32Async_ptsz),
    // arrays
    ENTRY(cuArrayCreate, 2000, cuArrayCreate),
    ENTRY(cuArrayCreate, 3020, cuArrayCreate_v2),
    ENTRY(cuArray3DCreate, 2000, cuArray3DCreate),
    ENTRY(cuArray3DCreate, 3020, cuArray3DCreate_v2),
    ENTRY(cuArrayDestroy, 2000, cuArrayDestroy),
    ENTRY(cuArrayGetDescriptor, 2000, cuArrayGetDescriptor),
    ENTRY(cuArrayGetDescriptor, 3020, cuArrayGetDescriptor_v2),
    ENTRY(cuArray3DGetDescriptor, 2000, cuArray3DGetDescriptor),
    ENTRY(cuArray3DGetDescriptor, 3020, cuArray3DGetDescriptor_v2),
    ENTRY(cuArrayGetMemoryRequirements, 11060, cuArrayGetMemoryRequirements),
    ENTRY(cuMipmappedArrayCreate, 5000, cuMipmappedArrayCreate),
    ENTRY(cuMipmappedArrayDestroy, 5000, cuMipmappedArrayDestroy),
    ENTRY(cuMipmappedArrayGetMemoryRequirements, 11060, cuMipmappedArrayGetMemoryRequirements),
    // stream-ordered allocation
    ENTRY(cuDeviceGetDefaultMemPool, 11020, cuDeviceGetDefaultMemPool),
    ENTRY(cuDeviceGetMemPool, 11020, cuDeviceGetMemPool),
    ENTRY(cuDeviceSetMemPool, 11020, cuDeviceSetMemPool),
    ENTRY(cuMemPoolCreate, 11020, cuMemPoolCreate),
    ENTRY(cuMemPoolDestroy, 11020, cuMemPoolDestroy),
    ENTRY(cuMemPoolTrimTo, 11020, cuMemPoolTrimTo),
    ENTRY(cuMemPoolGetAttribute, 11020, cuMemPoolGetAttribute),
    ENTRY(cuMemPoolSetAttribute, 11020, cuMemPoolSetAttribute),
    ENTRY(cuMemAllocAsync, 11020, cuMemAllocAsync),
    ENTRY_PT(cuMemAllocAsync, 11020, ptsz, cuMemAllocAsync_ptsz),
    ENTRY(cuMemAllocFromPoolAsync, 11020, cuMemAllocFromPoolAsync),
    ENTRY_PT(cuMemAllocFromPoolAsync, 11020, ptsz, cuMemAllocFromPoolAsync_ptsz),
    ENTRY(cuMemFreeAsync, 11020, cuMemFreeAsync),
    ENTRY_PT(cuMemFreeAsync, 11020, ptsz, cuMemFreeAsync_ptsz),
    // virtual memory management
    ENTRY(cuMemGetAllocationGranularity, 10020, cuMemGetAllocationGranularity),
    ENTRY(cuMemCreate, 10020, cuMemCreate),
    ENTRY(cuMemRelease, 10020, cuMemRelease),
    ENTRY(cuMemAddressReserve, 10020, cuMemAddressReserve),
    ENTRY(cuMemAddressFree, 10020, cuMemAddressFree),
    ENTRY(cuMemMap, 10020, cuMemMap),
    ENTRY(cuMemUnmap, 10020, cuMemUnmap),
    ENTRY(cuMemSetAccess, 10020, cuMemSetAccess),
    ENTRY(cuMemGetAllocationPropertiesFromHandle, 10020, cuMemGetAllocationPropertiesFromHandle),
    ENTRY(cuMemRetainAllocationHandle, 11000, cuMemRetainAllocationHandle),
    ENTRY(cuMemExportToShareableHandle, 10020, cuMemExportToShareableHandle),
    ENTRY(cuMemImportFromShareableHandle, 10020, cuMemImportFromShareableHandle),
    // IPC
    ENTRY(cuIpcGetMemHandle, 4010, cuIpcGetMemHandle),
    ENTRY(cuIpcOpenMemHandle, 4010, cuIpcOpenMemHandle),
    ENTRY(cuIpcOpenMemHandle, 11000, cuIpcOpenMemHandle_v2),
    ENTRY(cuIpcCloseMemHandle, 4010, cuIpcCloseMemHandle),
    ENTRY(cuIpcGetEventHandle, 4010, cuIpcGetEventHandle),
    ENTRY(cuIpcOpenEventHandle, 4010, cuIpcOpenEventHandle),
    // streams
    ENTRY(cuStreamCreate, 2000, cuStreamCreate),
    ENTRY(cuStreamCreateWithPriority, 5050, cuStreamCreateWithPriority),
    ENTRY(cuStreamDestroy, 2000, cuStreamDestroy),
    ENTRY(cuStreamDestroy, 4000, cuStreamDestroy_v2),
    ENTRY(cuStreamSynchronize, 2000, cuStreamSynchronize),
    ENTRY_PT(cuStreamSynchronize, 7000, ptsz, cuStreamSynchronize_ptsz),
    ENTRY(cuStreamQuery, 2000, cuStreamQuery),
    ENTRY_PT(cuStreamQuery, 7000, ptsz, cuStreamQuery_ptsz),
    ENTRY(cuStreamWaitEvent, 3020, cuStreamWaitEvent),
    ENTRY_PT(cuStreamWaitEvent, 7000, ptsz, cuStreamWaitEvent_ptsz),
    ENTRY(cuStreamGetPriority, 5050, cuStreamGetPriority),
    ENTRY_PT(cuStreamGetPriority, 7000, ptsz, cuStreamGetPriority_ptsz),
    ENTRY(cuStreamGetFlags, 5050, cuStreamGetFlags),
    ENTRY_PT(cuStreamGetFlags, 7000, ptsz, cuStreamGetFlags_ptsz),
    ENTRY(cuStreamGetCtx, 9020, cuStreamGetCtx),
    ENTRY_PT(cuStreamGetCtx, 9020, ptsz, cuStreamGetCtx_ptsz),
    ENTRY(cuStreamGetCtx, 12050, cuStreamGetCtx_v2),
    ENTRY_PT(cuStreamGetCtx, 12050, ptsz, cuStreamGetCtx_v2_ptsz),
    // events
    ENTRY(cuEventCreate, 2000, cuEventCreate),
    ENTRY(cuEventRecord, 2000, cuEventRecord),
    ENTRY_PT(cuEventRecord, 7000, ptsz, cuEventRecord_ptsz),
    ENTRY(cuEventRecordWithFlags, 11010, cuEventRecordWithFlags),
    ENTRY_PT(cuEventRecordWithFlags, 11010, ptsz, cuEventRecordWithFlags_ptsz),
    ENTRY(cuEventQuery, 2000, cuEventQuery),
    ENTRY(cuEventSynchronize, 2000, cuEventSynchronize),
    ENTRY(cuEventElapsedTime, 2000, cuEventElapsedTime),
    ENTRY(cuEventElapsedTime, 12080, cuEventElapsedTime_v2),
    ENTRY(cuEventDestroy, 2000, cuEventDestroy),
    ENTRY(cuEventDestroy, 4000, cuEventDestroy_v2),
    // modules, libraries, kernels
    ENTRY(cuModuleLoad, 2000, cuModuleLoad),
    ENTRY(cuModuleLoadData, 2000, cuModuleLoadData),
    ENTRY(cuModuleLoadDataEx, 2010, cuModuleLoadDataEx),
    ENTRY(cuModuleUnload, 2000, cuModuleUnload),
    ENTRY(cuModuleGetFunction, 2000, cuModuleGetFunction),
    ENTRY(cuLibraryLoadData, 12000, cuLibraryLoadData),
    ENTRY(cuLibraryUnload, 12000, cuLibraryUnload),
    ENTRY(cuLibraryGetKernel, 12000, cuLibraryGetKernel),
    ENTRY(cuKernelGetFunction, 12000, cuKernelGetFunction),
    ENTRY(cuFuncGetAttribute, 2020, cuFuncGetAttribute),
    ENTRY(cuLaunchKernel, 4000, cuLaunchKernel),
    ENTRY_PT(cuLaunchKernel, 7000, ptsz, cuLaunchKernel_ptsz),
    ENTRY(cuLaunchKernelEx, 11060, cuLaunchKernelEx),
    ENTRY_PT(cuLaunchKernelEx, 11060, ptsz, cuLaunchKernelEx_ptsz),
    ENTRY(cuLaunchCooperativeKernel, 9000, cuLaunchCooperativeKernel),
    ENTRY_PT(cuLaunchCooperativeKernel, 9000, ptsz, cuLaunchCooperativeKernel_ptsz),
    // process checkpoints (fake_cuda_checkpoint.cpp)
    ENTRY(cuCheckpointProcessGetState, 12080, cuCheckpointProcessGetState),
    ENTRY(cuCheckpointProcessLock, 12080, cuCheckpointProcessLock),
    ENTRY(cuCheckpointProcessCheckpoint, 12080, cuCheckpointProcessCheckpoint),
    ENTRY(cuCheckpointProcessRestore, 12080, cuCheckpointProcessRestore),
    ENTRY(cuCheckpointProcessUnlock, 12080, cuCheckpointProcessUnlock),
};

#undef ENTRY
#undef ENTRY_PT

CUresult get_proc_address(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* status) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  constexpr cuuint64_t kKnownFlags = CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if ((flags & ~kKnownFlags) || flags == kKnownFlags) return CUDA_ERROR_INVALID_VALUE;
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  bool found = false;
  const ProcEntry* plain = nullptr;
  const ProcEntry* threaded = nullptr;
  for (const auto& e : kProcTable) {
    if (std::strcmp(e.name, symbol) != 0) continue;
    found = true;
    if (e.version > cudaVersion) continue;
    const ProcEntry*& best = e.per_thread ? threaded : plain;
    if (!best || e.version > best->version) best = &e;
  }
  const ProcEntry* pick = plain;
  if (per_thread && threaded && (!plain || threaded->version >= plain->version)) pick = threaded;
  *pfn = nullptr;
  if (!found || !pick) {
    if (status) *status = found ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = pick->address();
  if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

// The table cuGetExportTable returns for kTestTableId.
struct TestExportTable {
  uint64_t magic;
  uint64_t size;
  int (*add_one)(int);
};

int add_one(int x) { return x + 1; }

constexpr TestExportTable kTestTable = {0x636e6c6162746231ull /* "cnlabtb1" */, sizeof(TestExportTable), &add_one};
constexpr char kTestTableId[16] = {'c', 'n', 'l', 'a', 'b', '-', 'f', 'a', 'k', 'e', '-', 't', 'a', 'b', 'l', 'e'};

}  // namespace
}  // namespace cnlab::fake_cuda

using namespace cnlab::fake_cuda;

extern "C" {

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* symbolStatus) {
  return get_proc_address(symbol, pfn, cudaVersion, flags, symbolStatus);
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return get_proc_address(symbol, pfn, cudaVersion, flags, nullptr);
}

CUresult cuGetExportTable(const void** ppExportTable, const CUuuid* pExportTableId) {
  g.export_table_calls.fetch_add(1, std::memory_order_relaxed);
  if (!ppExportTable || !pExportTableId) return CUDA_ERROR_INVALID_VALUE;
  if (std::memcmp(pExportTableId->bytes, kTestTableId, sizeof kTestTableId) != 0) {
    *ppExportTable = nullptr;
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  *ppExportTable = &kTestTable;
  return CUDA_SUCCESS;
}

}  // extern "C"
