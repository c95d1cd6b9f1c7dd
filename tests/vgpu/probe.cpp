// A CUDA program for the interception tests, built twice: `vgpu_probe_linked` is linked against
// libcuda.so.1 (it calls the exported symbols), `vgpu_probe_dlopen` reaches the driver the way the
// CUDA runtime does — dlopen("libcuda.so.1"), dlsym on that handle for cuGetProcAddress_v2, then
// every entry point by base name, version and flags. Each runs one scenario (argv[1]) and prints
// what it saw, one `key value...` line per fact, for the test to read. Compiled against the real
// cuda.h; run against the driver test double (tests/fakes) with libcnlab-vgpu.so preloaded.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

// The entry points the scenarios use, whichever way they were found.
struct Driver {
  PFN_cuInit_v2000 Init;
  PFN_cuDeviceGet_v2000 DeviceGet;
  PFN_cuDeviceGetCount_v2000 DeviceGetCount;
  PFN_cuDeviceTotalMem_v3020 DeviceTotalMem;
  PFN_cuDevicePrimaryCtxRetain_v7000 PrimaryCtxRetain;
  PFN_cuCtxSetCurrent_v4000 CtxSetCurrent;
  PFN_cuMemGetInfo_v3020 MemGetInfo;
  PFN_cuMemAlloc_v3020 MemAlloc;
  PFN_cuMemAllocPitch_v3020 MemAllocPitch;
  PFN_cuMemAllocManaged_v6000 MemAllocManaged;
  PFN_cuMemFree_v3020 MemFree;
  PFN_cuMemcpyHtoD_v3020 MemcpyHtoD;
  PFN_cuMemcpyDtoH_v3020 MemcpyDtoH;
  PFN_cuArrayCreate_v3020 ArrayCreate;
  PFN_cuArray3DCreate_v3020 Array3DCreate;
  PFN_cuArrayDestroy_v2000 ArrayDestroy;
  PFN_cuMipmappedArrayCreate_v5000 MipmappedArrayCreate;
  PFN_cuMipmappedArrayDestroy_v5000 MipmappedArrayDestroy;
  PFN_cuMemAllocAsync_v11020 MemAllocAsync;
  PFN_cuMemFreeAsync_v11020 MemFreeAsync;
  PFN_cuMemAllocFromPoolAsync_v11020 MemAllocFromPoolAsync;
  PFN_cuMemPoolCreate_v11020 MemPoolCreate;
  PFN_cuMemPoolDestroy_v11020 MemPoolDestroy;
  PFN_cuMemPoolTrimTo_v11020 MemPoolTrimTo;
  PFN_cuStreamCreate_v2000 StreamCreate;
  PFN_cuStreamSynchronize_v2000 StreamSynchronize;
  PFN_cuCtxSynchronize_v2000 CtxSynchronize;
  PFN_cuMemGetAllocationGranularity_v10020 MemGetAllocationGranularity;
  PFN_cuMemCreate_v10020 MemCreate;
  PFN_cuMemRelease_v10020 MemRelease;
  PFN_cuMemAddressReserve_v10020 MemAddressReserve;
  PFN_cuMemAddressFree_v10020 MemAddressFree;
  PFN_cuMemMap_v10020 MemMap;
  PFN_cuMemUnmap_v10020 MemUnmap;
  PFN_cuMemSetAccess_v10020 MemSetAccess;
  PFN_cuMemExportToShareableHandle_v10020 MemExportToShareableHandle;
  PFN_cuMemImportFromShareableHandle_v10020 MemImportFromShareableHandle;
  PFN_cuIpcGetMemHandle_v4010 IpcGetMemHandle;
  PFN_cuIpcOpenMemHandle_v11000 IpcOpenMemHandle;
  PFN_cuIpcCloseMemHandle_v4010 IpcCloseMemHandle;
  PFN_cuEventCreate_v2000 EventCreate;
  PFN_cuIpcGetEventHandle_v4010 IpcGetEventHandle;
  PFN_cuIpcOpenEventHandle_v4010 IpcOpenEventHandle;
  PFN_cuModuleLoadData_v2000 ModuleLoadData;
  PFN_cuModuleGetFunction_v2000 ModuleGetFunction;
  PFN_cuLaunchKernel_v4000 LaunchKernel;
  PFN_cuGetExportTable_v3000 GetExportTable;
};
Driver d;

#if defined(PROBE_LINKED)
void find_driver() {
  d.Init = &cuInit;
  d.DeviceGet = &cuDeviceGet;
  d.DeviceGetCount = &cuDeviceGetCount;
  d.DeviceTotalMem = &cuDeviceTotalMem;
  d.PrimaryCtxRetain = &cuDevicePrimaryCtxRetain;
  d.CtxSetCurrent = &cuCtxSetCurrent;
  d.MemGetInfo = &cuMemGetInfo;
  d.MemAlloc = &cuMemAlloc;
  d.MemAllocPitch = &cuMemAllocPitch;
  d.MemAllocManaged = &cuMemAllocManaged;
  d.MemFree = &cuMemFree;
  d.MemcpyHtoD = &cuMemcpyHtoD;
  d.MemcpyDtoH = &cuMemcpyDtoH;
  d.ArrayCreate = &cuArrayCreate;
  d.Array3DCreate = &cuArray3DCreate;
  d.ArrayDestroy = &cuArrayDestroy;
  d.MipmappedArrayCreate = &cuMipmappedArrayCreate;
  d.MipmappedArrayDestroy = &cuMipmappedArrayDestroy;
  d.MemAllocAsync = &cuMemAllocAsync;
  d.MemFreeAsync = &cuMemFreeAsync;
  d.MemAllocFromPoolAsync = &cuMemAllocFromPoolAsync;
  d.MemPoolCreate = &cuMemPoolCreate;
  d.MemPoolDestroy = &cuMemPoolDestroy;
  d.MemPoolTrimTo = &cuMemPoolTrimTo;
  d.StreamCreate = &cuStreamCreate;
  d.StreamSynchronize = &cuStreamSynchronize;
  d.CtxSynchronize = &cuCtxSynchronize;
  d.MemGetAllocationGranularity = &cuMemGetAllocationGranularity;
  d.MemCreate = &cuMemCreate;
  d.MemRelease = &cuMemRelease;
  d.MemAddressReserve = &cuMemAddressReserve;
  d.MemAddressFree = &cuMemAddressFree;
  d.MemMap = &cuMemMap;
  d.MemUnmap = &cuMemUnmap;
  d.MemSetAccess = &cuMemSetAccess;
  d.MemExportToShareableHandle = &cuMemExportToShareableHandle;
  d.MemImportFromShareableHandle = &cuMemImportFromShareableHandle;
  d.IpcGetMemHandle = &cuIpcGetMemHandle;
  d.IpcOpenMemHandle = &cuIpcOpenMemHandle;
  d.IpcCloseMemHandle = &cuIpcCloseMemHandle;
  d.EventCreate = &cuEventCreate;
  d.IpcGetEventHandle = &cuIpcGetEventHandle;
  d.IpcOpenEventHandle = &cuIpcOpenEventHandle;
  d.ModuleLoadData = &cuModuleLoadData;
  d.ModuleGetFunction = &cuModuleGetFunction;
  d.LaunchKernel = &cuLaunchKernel;
  d.GetExportTable = &cuGetExportTable;
}
#else
template <typename T>
void lookup(PFN_cuGetProcAddress_v12000 get, const char* name, T* out) {
  CUdriverProcAddressQueryResult status;
  void* p = nullptr;
  if (get(name, &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS || !p) {
    std::printf("missing %s\n", name);
    std::exit(3);
  }
  *out = reinterpret_cast<T>(p);
}
void find_driver() {
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    std::printf("dlopen %s\n", dlerror());
    std::exit(3);
  }
  auto get = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(handle, "cuGetProcAddress_v2"));
  if (!get) std::exit(3);
  lookup(get, "cuInit", &d.Init);
  lookup(get, "cuDeviceGet", &d.DeviceGet);
  lookup(get, "cuDeviceGetCount", &d.DeviceGetCount);
  lookup(get, "cuDeviceTotalMem", &d.DeviceTotalMem);
  lookup(get, "cuDevicePrimaryCtxRetain", &d.PrimaryCtxRetain);
  lookup(get, "cuCtxSetCurrent", &d.CtxSetCurrent);
  lookup(get, "cuMemGetInfo", &d.MemGetInfo);
  lookup(get, "cuMemAlloc", &d.MemAlloc);
  lookup(get, "cuMemAllocPitch", &d.MemAllocPitch);
  lookup(get, "cuMemAllocManaged", &d.MemAllocManaged);
  lookup(get, "cuMemFree", &d.MemFree);
  lookup(get, "cuMemcpyHtoD", &d.MemcpyHtoD);
  lookup(get, "cuMemcpyDtoH", &d.MemcpyDtoH);
  lookup(get, "cuArrayCreate", &d.ArrayCreate);
  lookup(get, "cuArray3DCreate", &d.Array3DCreate);
  lookup(get, "cuArrayDestroy", &d.ArrayDestroy);
  lookup(get, "cuMipmappedArrayCreate", &d.MipmappedArrayCreate);
  lookup(get, "cuMipmappedArrayDestroy", &d.MipmappedArrayDestroy);
  lookup(get, "cuMemAllocAsync", &d.MemAllocAsync);
  lookup(get, "cuMemFreeAsync", &d.MemFreeAsync);
  lookup(get, "cuMemAllocFromPoolAsync", &d.MemAllocFromPoolAsync);
  lookup(get, "cuMemPoolCreate", &d.MemPoolCreate);
  lookup(get, "cuMemPoolDestroy", &d.MemPoolDestroy);
  lookup(get, "cuMemPoolTrimTo", &d.MemPoolTrimTo);
  lookup(get, "cuStreamCreate", &d.StreamCreate);
  lookup(get, "cuStreamSynchronize", &d.StreamSynchronize);
  lookup(get, "cuCtxSynchronize", &d.CtxSynchronize);
  lookup(get, "cuMemGetAllocationGranularity", &d.MemGetAllocationGranularity);
  lookup(get, "cuMemCreate", &d.MemCreate);
  lookup(get, "cuMemRelease", &d.MemRelease);
  lookup(get, "cuMemAddressReserve", &d.MemAddressReserve);
  lookup(get, "cuMemAddressFree", &d.MemAddressFree);
  lookup(get, "cuMemMap", &d.MemMap);
  lookup(get, "cuMemUnmap", &d.MemUnmap);
  lookup(get, "cuMemSetAccess", &d.MemSetAccess);
  lookup(get, "cuMemExportToShareableHandle", &d.MemExportToShareableHandle);
  lookup(get, "cuMemImportFromShareableHandle", &d.MemImportFromShareableHandle);
  lookup(get, "cuIpcGetMemHandle", &d.IpcGetMemHandle);
  lookup(get, "cuIpcOpenMemHandle", &d.IpcOpenMemHandle);
  lookup(get, "cuIpcCloseMemHandle", &d.IpcCloseMemHandle);
  lookup(get, "cuEventCreate", &d.EventCreate);
  lookup(get, "cuIpcGetEventHandle", &d.IpcGetEventHandle);
  lookup(get, "cuIpcOpenEventHandle", &d.IpcOpenEventHandle);
  lookup(get, "cuModuleLoadData", &d.ModuleLoadData);
  lookup(get, "cuModuleGetFunction", &d.ModuleGetFunction);
  lookup(get, "cuLaunchKernel", &d.LaunchKernel);
  lookup(get, "cuGetExportTable", &d.GetExportTable);
}
#endif

constexpr size_t kMiB = size_t{1} << 20;

void say(const char* key, long long value) { std::printf("%s %lld\n", key, value); }

CUcontext g_context = nullptr;

void init() {
  find_driver();
  CUresult r = d.Init(0);
  if (r != CUDA_SUCCESS) {
    say("init", r);
    std::fflush(stdout);
    std::exit(2);
  }
  CUdevice dev;
  d.DeviceGet(&dev, 0);
  d.PrimaryCtxRetain(&g_context, dev);
  d.CtxSetCurrent(g_context);
}

void info(const char* prefix) {
  size_t free = 0, total = 0, device_total = 0;
  CUresult r = d.MemGetInfo(&free, &total);
  d.DeviceTotalMem(&device_total, 0);
  std::printf("%s_info %d free %zu total %zu device_total %zu\n", prefix, r, free, total, device_total);
}

std::string hex(const void* data, size_t size) {
  std::string out;
  char two[3];
  for (size_t i = 0; i < size; ++i) {
    std::snprintf(two, sizeof two, "%02x", static_cast<const unsigned char*>(data)[i]);
    out += two;
  }
  return out;
}

void unhex(const char* text, void* out, size_t size) {
  for (size_t i = 0; i < size; ++i) {
    unsigned v = 0;
    std::sscanf(text + 2 * i, "%2x", &v);
    static_cast<unsigned char*>(out)[i] = static_cast<unsigned char>(v);
  }
}

// Waits until stdin closes (the test's way to say "exit now").
void hold() {
  std::fflush(stdout);
  char c;
  while (::read(0, &c, 1) > 0) {
  }
}

// ---- Scenarios ------------------------------------------------------------------------------------

// alloc MiB...: allocate each size, say each result, then the memory view; free all; view again.
int alloc_sizes(int argc, char** argv) {
  std::vector<CUdeviceptr> held;
  for (int i = 2; i < argc; ++i) {
    CUdeviceptr p = 0;
    CUresult r = d.MemAlloc(&p, std::strtoull(argv[i], nullptr, 10) * kMiB);
    say("alloc", r);
    if (r == CUDA_SUCCESS) held.push_back(p);
  }
  info("held");
  for (CUdeviceptr p : held) d.MemFree(p);
  info("freed");
  return 0;
}

// paths LIMIT_MIB: every allocation path, each first within the limit (must succeed) and then with
// a request beyond what is left (must fail with CUDA_ERROR_OUT_OF_MEMORY), freed again; the view
// must come back to all free.
int every_path(int, char** argv) {
  const size_t limit = std::strtoull(argv[2], nullptr, 10) * kMiB;
  // First the request within the limit, then (while it is held) the one beyond what is left.
  auto check = [&](const char* name, auto within, auto beyond) {
    CUresult first = within();
    CUresult second = beyond();
    std::printf("path %s within %d beyond %d\n", name, first, second);
  };
  CUdeviceptr a = 0, b = 0;
  size_t pitch = 0;
  check("cuMemAlloc", [&] { return d.MemAlloc(&a, limit / 2); }, [&] { return d.MemAlloc(&b, limit / 2 + kMiB); });
  d.MemFree(a);
  check("cuMemAllocPitch", [&] { return d.MemAllocPitch(&a, &pitch, 4096, limit / 2 / 4096, 4); },
        [&] { return d.MemAllocPitch(&b, &pitch, 4096, (limit / 2 + kMiB) / 4096, 4); });
  d.MemFree(a);
  check("cuMemAllocManaged", [&] { return d.MemAllocManaged(&a, limit / 2, CU_MEM_ATTACH_GLOBAL); },
        [&] { return d.MemAllocManaged(&b, limit / 2 + kMiB, CU_MEM_ATTACH_GLOBAL); });
  d.MemFree(a);

  CUarray arr = nullptr, arr2 = nullptr;
  CUDA_ARRAY_DESCRIPTOR desc{};
  desc.Format = CU_AD_FORMAT_FLOAT;
  desc.NumChannels = 1;
  desc.Width = 1024;
  desc.Height = limit / 2 / 4096;
  CUDA_ARRAY_DESCRIPTOR big = desc;
  big.Height = (limit / 2 + kMiB) / 4096;
  check("cuArrayCreate", [&] { return d.ArrayCreate(&arr, &desc); }, [&] { return d.ArrayCreate(&arr2, &big); });
  d.ArrayDestroy(arr);
  CUDA_ARRAY3D_DESCRIPTOR desc3{};
  desc3.Format = CU_AD_FORMAT_FLOAT;
  desc3.NumChannels = 1;
  desc3.Width = 1024;
  desc3.Height = 64;
  desc3.Depth = limit / 2 / (4096 * 64);
  CUDA_ARRAY3D_DESCRIPTOR big3 = desc3;
  big3.Depth = (limit / 2 + kMiB) / (4096 * 64);
  check("cuArray3DCreate", [&] { return d.Array3DCreate(&arr, &desc3); }, [&] { return d.Array3DCreate(&arr2, &big3); });
  d.ArrayDestroy(arr);
  CUmipmappedArray mip = nullptr, mip2 = nullptr;
  check("cuMipmappedArrayCreate", [&] { return d.MipmappedArrayCreate(&mip, &desc3, 1); },
        [&] { return d.MipmappedArrayCreate(&mip2, &big3, 1); });
  d.MipmappedArrayDestroy(mip);

  CUstream stream = nullptr;
  d.StreamCreate(&stream, 0);
  check("cuMemAllocAsync", [&] { return d.MemAllocAsync(&a, limit / 2, stream); },
        [&] { return d.MemAllocAsync(&b, limit / 2 + kMiB, stream); });
  d.MemFreeAsync(a, stream);
  d.StreamSynchronize(stream);  // the default pool (threshold 0) gives its memory back here
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CUmemoryPool pool = nullptr;
  d.MemPoolCreate(&pool, &props);
  check("cuMemAllocFromPoolAsync", [&] { return d.MemAllocFromPoolAsync(&a, limit / 2, pool, stream); },
        [&] { return d.MemAllocFromPoolAsync(&b, limit / 2 + kMiB, pool, stream); });
  d.MemFreeAsync(a, stream);
  d.MemPoolTrimTo(pool, 0);  // freed memory stays reserved by the pool until trimmed
  d.MemPoolDestroy(pool);

  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t granularity = 0;
  d.MemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  size_t half = limit / 2 / granularity * granularity;
  CUmemGenericAllocationHandle h1 = 0, h2 = 0;
  check("cuMemCreate", [&] { return d.MemCreate(&h1, half, &prop, 0); },
        [&] { return d.MemCreate(&h2, (limit - half) / granularity * granularity + granularity, &prop, 0); });
  d.MemRelease(h1);
  info("after");
  return 0;
}

// vmm-map-release MIB: create, map, release the handle while mapped (memory stays), then unmap.
int vmm_release_while_mapped(int, char** argv) {
  size_t size = std::strtoull(argv[2], nullptr, 10) * kMiB;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CUmemGenericAllocationHandle h = 0;
  say("create", d.MemCreate(&h, size, &prop, 0));
  CUdeviceptr va = 0;
  d.MemAddressReserve(&va, size, 0, 0, 0);
  say("map", d.MemMap(va, size, 0, h, 0));
  say("release", d.MemRelease(h));
  info("mapped");
  say("unmap", d.MemUnmap(va, size));
  info("unmapped");
  d.MemAddressFree(va, size);
  return 0;
}

// hold MIB [SECONDS]: allocate, say so, keep it until stdin closes (or for SECONDS).
int hold_memory(int argc, char** argv) {
  CUdeviceptr p = 0;
  say("alloc", d.MemAlloc(&p, std::strtoull(argv[2], nullptr, 10) * kMiB));
  info("held");
  if (argc > 3) {
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(argv[3])));
  } else {
    hold();
  }
  return 0;
}

// ipc-export: allocate 2 MiB with a pattern, print the memory and event handles, hold.
int ipc_export(int, char**) {
  CUdeviceptr p = 0;
  d.MemAlloc(&p, 2 * kMiB);
  const char pattern[] = "shared by the exporter";
  d.MemcpyHtoD(p, pattern, sizeof pattern);
  CUipcMemHandle mem{};
  say("get_mem_handle", d.IpcGetMemHandle(&mem, p));
  CUevent event = nullptr;
  d.EventCreate(&event, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING);
  CUipcEventHandle ev{};
  say("get_event_handle", d.IpcGetEventHandle(&ev, event));
  std::printf("mem_handle %s\nevent_handle %s\n", hex(&mem, sizeof mem).c_str(), hex(&ev, sizeof ev).c_str());
  hold();
  return 0;
}

// ipc-open MEM_HEX EVENT_HEX: open both; on success read the pattern.
int ipc_open(int, char** argv) {
  CUipcMemHandle mem{};
  unhex(argv[2], &mem, sizeof mem);
  CUipcEventHandle ev{};
  unhex(argv[3], &ev, sizeof ev);
  CUdeviceptr p = 0;
  CUresult r = d.IpcOpenMemHandle(&p, mem, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  say("open_mem", r);
  if (r == CUDA_SUCCESS) {
    char text[64] = {};
    d.MemcpyDtoH(text, p, sizeof text - 1);
    std::printf("read %s\n", text);
    d.IpcCloseMemHandle(p);
  }
  CUevent event = nullptr;
  say("open_event", d.IpcOpenEventHandle(&event, ev));
  return 0;
}

// vmm-export MIB: create shareable physical memory, print this pid and the exported fd, hold.
int vmm_export(int, char** argv) {
  size_t size = std::strtoull(argv[2], nullptr, 10) * kMiB;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CUmemGenericAllocationHandle h = 0;
  say("create", d.MemCreate(&h, size, &prop, 0));
  int fd = -1;
  say("export", d.MemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  std::printf("fd_path /proc/%d/fd/%d\n", static_cast<int>(::getpid()), fd);
  hold();
  return 0;
}

// vmm-import PATH MIB: open the exporter's fd through /proc, import it, map it.
int vmm_import(int, char** argv) {
  int fd = ::open(argv[2], O_RDWR);
  CUmemGenericAllocationHandle h = 0;
  CUresult r = d.MemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  say("import", r);
  if (r != CUDA_SUCCESS) return 0;
  size_t size = std::strtoull(argv[3], nullptr, 10) * kMiB;
  CUdeviceptr va = 0;
  d.MemAddressReserve(&va, size, 0, 0, 0);
  say("map", d.MemMap(va, size, 0, h, 0));
  info("imported");
  return 0;
}

// grow MIB STEP_MIB: allocate STEP until refused, say how much it got; repeat each time stdin
// gives a line (the test resizes the quota in between); exit at EOF.
// Allocates `step` bytes at a time into `held` until refused; says how much it holds, and the view.
void grow_until_refused(std::vector<CUdeviceptr>& held, size_t step) {
  for (;;) {
    CUdeviceptr p = 0;
    if (d.MemAlloc(&p, step) != CUDA_SUCCESS) break;
    held.push_back(p);
  }
  say("holding_mib", static_cast<long long>(held.size() * step / kMiB));
  info("grow");
  std::fflush(stdout);
}

int grow(int, char** argv) {
  size_t step = std::strtoull(argv[2], nullptr, 10) * kMiB;
  std::vector<CUdeviceptr> held;
  char line[64];
  do {
    grow_until_refused(held, step);
  } while (std::fgets(line, sizeof line, stdin));
  return 0;
}

// grow-when FILE STEP_MIB: allocate STEP until refused, say how much it holds and what
// cuMemGetInfo says; then, each time FILE appears, remove it and do the same again (for a job that
// is dumped and restored meanwhile, whose stdin the test does not hold).
int grow_when(int, char** argv) {
  const char* trigger = argv[2];
  size_t step = std::strtoull(argv[3], nullptr, 10) * kMiB;
  std::vector<CUdeviceptr> held;
  for (;;) {
    grow_until_refused(held, step);
    while (::access(trigger, F_OK) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ::unlink(trigger);
  }
}

// grow-for SECONDS STEP_MIB: allocate STEP until refused, again every 200 ms for SECONDS (its limit
// may grow meanwhile); say how much it holds whenever that changes.
int grow_for(int, char** argv) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::atof(argv[2]));
  size_t step = std::strtoull(argv[3], nullptr, 10) * kMiB;
  std::vector<CUdeviceptr> held;
  size_t said = ~size_t{0};
  while (std::chrono::steady_clock::now() < end) {
    for (;;) {
      CUdeviceptr p = 0;
      if (d.MemAlloc(&p, step) != CUDA_SUCCESS) break;
      held.push_back(p);
    }
    if (held.size() != said) {
      said = held.size();
      say("holding_mib", static_cast<long long>(held.size() * step / kMiB));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  info("grown");
  return 0;
}

// threads N ROUNDS: N threads allocate and free 1 MiB blocks in a loop; at the end the view must be
// all free again.
int threads(int, char** argv) {
  int n = std::atoi(argv[2]), rounds = std::atoi(argv[3]);
  std::atomic<long long> failures{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < n; ++t) {
    pool.emplace_back([&] {
      d.CtxSetCurrent(g_context);
      std::vector<CUdeviceptr> mine;
      for (int i = 0; i < rounds; ++i) {
        CUdeviceptr p = 0;
        if (d.MemAlloc(&p, kMiB) == CUDA_SUCCESS) mine.push_back(p);
        else ++failures;
        if (mine.size() > 4 || (i % 3 == 0 && !mine.empty())) {
          d.MemFree(mine.back());
          mine.pop_back();
        }
      }
      for (CUdeviceptr p : mine) d.MemFree(p);
    });
  }
  for (auto& t : pool) t.join();
  say("failures", failures.load());
  info("end");
  return 0;
}

// launch KERNEL SECONDS [BATCH]: launch the kernel in batches (then synchronise) for SECONDS; say
// how many launched.
int launch(int argc, char** argv) {
  CUmodule module = nullptr;
  d.ModuleLoadData(&module, "fake image");
  CUfunction f = nullptr;
  d.ModuleGetFunction(&f, module, argv[2]);
  double seconds = std::atof(argv[3]);
  int batch = argc > 4 ? std::atoi(argv[4]) : 8;
  // The driver test double's own count of this process's GPU time, printed every half second.
  using BusyHook = unsigned long long (*)(int, int);
  auto busy = reinterpret_cast<BusyHook>(dlsym(RTLD_DEFAULT, "fake_cuda_busy_ns"));
  auto start = std::chrono::steady_clock::now();
  auto end = start + std::chrono::duration<double>(seconds);
  auto next_mark = start;
  long long launched = 0;
  while (std::chrono::steady_clock::now() < end) {
    for (int i = 0; i < batch; ++i) {
      if (d.LaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr) == CUDA_SUCCESS) ++launched;
    }
    d.CtxSynchronize();
    auto now = std::chrono::steady_clock::now();
    if (busy && now >= next_mark) {
      long long ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count();
      std::printf("busy %lld at_ms %lld\n", static_cast<long long>(busy(0, static_cast<int>(::getpid()))), ms);
      next_mark += std::chrono::milliseconds(500);
    }
  }
  say("launched", launched);
  return 0;
}

// nvml MIB: allocate MIB, then read the memory through NVML (v1 and v2) and through CUDA.
int nvml_view(int, char** argv) {
  struct Memory {
    unsigned long long total, free, used;
  };
  struct MemoryV2 {
    unsigned int version;
    unsigned long long total, reserved, free, used;
  };
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!nvml) return 3;
  auto init = reinterpret_cast<int (*)()>(dlsym(nvml, "nvmlInit_v2"));
  auto by_index = reinterpret_cast<int (*)(unsigned, void**)>(dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2"));
  auto memory = reinterpret_cast<int (*)(void*, Memory*)>(dlsym(nvml, "nvmlDeviceGetMemoryInfo"));
  auto memory2 = reinterpret_cast<int (*)(void*, MemoryV2*)>(dlsym(nvml, "nvmlDeviceGetMemoryInfo_v2"));
  if (!init || !by_index || !memory || !memory2 || init() != 0) return 3;
  CUdeviceptr p = 0;
  say("alloc", d.MemAlloc(&p, std::strtoull(argv[2], nullptr, 10) * kMiB));
  void* device = nullptr;
  by_index(0, &device);
  Memory m{};
  MemoryV2 m2{};
  m2.version = static_cast<unsigned>(sizeof m2) | (2u << 24);
  int r1 = memory(device, &m);
  int r2 = memory2(device, &m2);
  std::printf("nvml_v1 %d total %llu free %llu used %llu\n", r1, m.total, m.free, m.used);
  std::printf("nvml_v2 %d total %llu free %llu used %llu\n", r2, m2.total, m2.free, m2.used);
  info("cuda");
  return 0;
}

// export-table: the runtime's private tables pass through untouched.
int export_table(int, char**) {
  CUuuid id;
  std::memcpy(id.bytes, "cnlab-fake-table", 16);
  const void* table = nullptr;
  CUresult r = d.GetExportTable(&table, &id);
  say("export_table", r);
  if (r == CUDA_SUCCESS) std::printf("magic %llx\n", static_cast<unsigned long long>(*static_cast<const uint64_t*>(table)));
  return 0;
}

// fork MIB: the parent holds MIB, a child allocates MIB too (its own slot), then both free.
int fork_child(int, char** argv) {
  size_t size = std::strtoull(argv[2], nullptr, 10) * kMiB;
  CUdeviceptr p = 0;
  say("parent_alloc", d.MemAlloc(&p, size));
  pid_t child = ::fork();
  if (child == 0) {
    init();
    CUdeviceptr q = 0;
    say("child_alloc", d.MemAlloc(&q, size));
    info("child");
    std::fflush(stdout);
    ::_exit(0);
  }
  ::waitpid(child, nullptr, 0);
  info("parent");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc < 2) return 64;
  std::string scenario = argv[1];
  init();
  if (scenario == "info") info("start");
  else if (scenario == "alloc") alloc_sizes(argc, argv);
  else if (scenario == "paths") every_path(argc, argv);
  else if (scenario == "vmm-map-release") vmm_release_while_mapped(argc, argv);
  else if (scenario == "hold") hold_memory(argc, argv);
  else if (scenario == "grow-when") grow_when(argc, argv);
  else if (scenario == "ipc-export") ipc_export(argc, argv);
  else if (scenario == "ipc-open") ipc_open(argc, argv);
  else if (scenario == "vmm-export") vmm_export(argc, argv);
  else if (scenario == "vmm-import") vmm_import(argc, argv);
  else if (scenario == "grow") grow(argc, argv);
  else if (scenario == "grow-for") grow_for(argc, argv);
  else if (scenario == "threads") threads(argc, argv);
  else if (scenario == "launch") launch(argc, argv);
  else if (scenario == "export-table") export_table(argc, argv);
  else if (scenario == "nvml") nvml_view(argc, argv);
  else if (scenario == "fork") fork_child(argc, argv);
  else return 64;
  std::fflush(stdout);
  return 0;
}
