// Tests of the TEST DOUBLE of libcuda.so.1 (tests/fakes/fake_cuda.cpp). The library is dlopen()ed by
// path and every driver function is found through cuGetProcAddress_v2, as the CUDA runtime does.
// Each test has its own FAKE_CUDA_STATE_DIR and starts from fake_cuda_reset_state(); the tests that
// need a second process fork one (the fake gives a forked child a fresh, uninitialised driver).
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <cudaTypedefs.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1024 * 1024;

// The driver functions the tests call: member `X` is cuX at the named version's ABI.
#define CU_API(X)                                                                                        \
  X(Init, 2000) X(DriverGetVersion, 2020) X(DeviceGetCount, 2000) X(DeviceGet, 2000)                     \
  X(DeviceGetName, 2000) X(DeviceGetUuid, 11040) X(DeviceTotalMem, 3020) X(DeviceGetAttribute, 2000)     \
  X(DeviceGetPCIBusId, 4010) X(GetErrorName, 6000) X(GetErrorString, 6000) X(GetExportTable, 3000)       \
  X(DevicePrimaryCtxRetain, 7000) X(DevicePrimaryCtxRelease, 11000) X(DevicePrimaryCtxReset, 11000)      \
  X(DevicePrimaryCtxGetState, 7000) X(CtxCreate, 3020) X(CtxDestroy, 4000) X(CtxSetCurrent, 4000)        \
  X(CtxGetCurrent, 4000) X(CtxPushCurrent, 4000) X(CtxPopCurrent, 4000) X(CtxGetDevice, 2000)            \
  X(CtxSynchronize, 2000) X(MemAlloc, 3020) X(MemAllocPitch, 3020) X(MemAllocManaged, 6000)              \
  X(MemFree, 3020) X(MemGetInfo, 3020) X(MemGetAddressRange, 3020) X(MemcpyHtoD, 3020)                   \
  X(MemcpyDtoH, 3020) X(MemcpyDtoD, 3020) X(MemsetD8, 3020) X(Memcpy, 4000) X(ArrayCreate, 3020)         \
  X(Array3DCreate, 3020) X(ArrayDestroy, 2000) X(ArrayGetDescriptor, 3020)                               \
  X(ArrayGetMemoryRequirements, 11060) X(MipmappedArrayCreate, 5000) X(MipmappedArrayDestroy, 5000)      \
  X(MipmappedArrayGetMemoryRequirements, 11060) X(DeviceGetDefaultMemPool, 11020)                        \
  X(DeviceGetMemPool, 11020) X(DeviceSetMemPool, 11020) X(MemPoolCreate, 11020) X(MemPoolDestroy, 11020) \
  X(MemAllocAsync, 11020) X(MemAllocFromPoolAsync, 11020) X(MemFreeAsync, 11020) X(MemPoolTrimTo, 11020) \
  X(MemPoolGetAttribute, 11020) X(MemPoolSetAttribute, 11020) X(MemGetAllocationGranularity, 10020)      \
  X(MemCreate, 10020) X(MemRelease, 10020) X(MemAddressReserve, 10020) X(MemAddressFree, 10020)          \
  X(MemMap, 10020) X(MemUnmap, 10020) X(MemSetAccess, 10020) X(MemGetAllocationPropertiesFromHandle, 10020) \
  X(MemRetainAllocationHandle, 11000) X(MemExportToShareableHandle, 10020)                               \
  X(MemImportFromShareableHandle, 10020) X(IpcGetMemHandle, 4010) X(IpcOpenMemHandle, 11000)             \
  X(IpcCloseMemHandle, 4010) X(IpcGetEventHandle, 4010) X(IpcOpenEventHandle, 4010) X(StreamCreate, 2000) \
  X(StreamDestroy, 4000) X(StreamSynchronize, 2000) X(StreamQuery, 2000) X(EventCreate, 2000)            \
  X(EventRecord, 2000) X(EventQuery, 2000) X(EventSynchronize, 2000) X(EventElapsedTime, 12080)          \
  X(EventDestroy, 4000) X(ModuleLoadData, 2000) X(ModuleUnload, 2000) X(ModuleGetFunction, 2000)         \
  X(LibraryLoadData, 12000) X(LibraryGetKernel, 12000) X(KernelGetFunction, 12000)                       \
  X(FuncGetAttribute, 2020) X(LaunchKernel, 4000) X(LaunchKernelEx, 11060)

struct Cu {
#define DECLARE(name, version) PFN_cu##name##_v##version name = nullptr;
  CU_API(DECLARE)
#undef DECLARE
  PFN_cuGetProcAddress_v12000 GetProcAddress = nullptr;
  PFN_cuLaunchKernel_v7000_ptsz LaunchKernel_ptsz = nullptr;
  PFN_cuStreamSynchronize_v7000_ptsz StreamSynchronize_ptsz = nullptr;
  PFN_cuStreamQuery_v7000_ptsz StreamQuery_ptsz = nullptr;
  // Test hooks.
  unsigned long long (*busy_ns)(int, int) = nullptr;
  unsigned long long (*used_bytes)(int) = nullptr;
  unsigned long long (*process_used_bytes)(int, int) = nullptr;
  unsigned long long (*busy_until_ns)(int) = nullptr;
  unsigned long long (*launches)(int, int) = nullptr;
  int (*export_table_calls)() = nullptr;
  void (*reset)() = nullptr;
  void* handle = nullptr;
};

template <typename T>
T hook(void* handle, const char* name) {
  void* p = dlsym(handle, name);
  if (!p) {
    std::fprintf(stderr, "fake_cuda_test: %s missing from %s\n", name, FAKE_CUDA_LIBRARY);
    std::abort();
  }
  return reinterpret_cast<T>(p);
}

const Cu& cu() {
  static const Cu api = [] {
    Cu c;
    c.handle = dlopen(FAKE_CUDA_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!c.handle) {
      std::fprintf(stderr, "fake_cuda_test: dlopen(%s): %s\n", FAKE_CUDA_LIBRARY, dlerror());
      std::abort();
    }
    c.GetProcAddress = hook<PFN_cuGetProcAddress_v12000>(c.handle, "cuGetProcAddress_v2");
    auto get = [&](const char* name, int version, cuuint64_t flags) {
      void* p = nullptr;
      CUdriverProcAddressQueryResult status;
      if (c.GetProcAddress(name, &p, version, flags, &status) != CUDA_SUCCESS || !p) {
        std::fprintf(stderr, "fake_cuda_test: cuGetProcAddress(%s, %d) failed\n", name, version);
        std::abort();
      }
      return p;
    };
#define RESOLVE(name, version) \
  c.name = reinterpret_cast<PFN_cu##name##_v##version>(get("cu" #name, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM));
    CU_API(RESOLVE)
#undef RESOLVE
    const cuuint64_t pt = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    c.LaunchKernel_ptsz = reinterpret_cast<PFN_cuLaunchKernel_v7000_ptsz>(get("cuLaunchKernel", 7000, pt));
    c.StreamSynchronize_ptsz =
        reinterpret_cast<PFN_cuStreamSynchronize_v7000_ptsz>(get("cuStreamSynchronize", 7000, pt));
    c.StreamQuery_ptsz = reinterpret_cast<PFN_cuStreamQuery_v7000_ptsz>(get("cuStreamQuery", 7000, pt));
    c.busy_ns = hook<decltype(c.busy_ns)>(c.handle, "fake_cuda_busy_ns");
    c.used_bytes = hook<decltype(c.used_bytes)>(c.handle, "fake_cuda_used_bytes");
    c.process_used_bytes = hook<decltype(c.process_used_bytes)>(c.handle, "fake_cuda_process_used_bytes");
    c.busy_until_ns = hook<decltype(c.busy_until_ns)>(c.handle, "fake_cuda_busy_until_ns");
    c.launches = hook<decltype(c.launches)>(c.handle, "fake_cuda_launches");
    c.export_table_calls = hook<decltype(c.export_table_calls)>(c.handle, "fake_cuda_export_table_calls");
    c.reset = hook<decltype(c.reset)>(c.handle, "fake_cuda_reset_state");
    return c;
  }();
  return api;
}

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Polls `done` until it holds or 20 s pass.
bool eventually(const std::function<bool()>& done) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Two pipes between the test and a forked child; every read has a 20 s deadline.
struct Channel {
  int in = -1;
  int out = -1;
  bool put(const void* data, size_t n) const {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t w = write(out, p, n);
      if (w <= 0) return false;
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }
  bool get(void* data, size_t n) const {
    char* p = static_cast<char*>(data);
    while (n > 0) {
      pollfd pfd{in, POLLIN, 0};
      if (poll(&pfd, 1, 20000) != 1) return false;
      ssize_t r = read(in, p, n);
      if (r <= 0) return false;
      p += r;
      n -= static_cast<size_t>(r);
    }
    return true;
  }
  bool put_u64(uint64_t v) const { return put(&v, sizeof v); }
  uint64_t get_u64() const {
    uint64_t v = ~0ull;
    return get(&v, sizeof v) ? v : ~0ull;
  }
};

struct Child {
  pid_t pid = -1;
  Channel channel;
  // Waits for the child; its exit status (or 128 + signal).
  int wait() {
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return -1;
    close(channel.in);
    close(channel.out);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
};

// Runs `body` in a forked child, which exits with its result (0: passed). The fake gives the child
// no CUDA state: it calls cuInit itself.
Child spawn(const std::function<int(const Channel&)>& body) {
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) std::abort();
  pid_t pid = fork();
  if (pid == 0) {
    close(to_child[1]);
    close(from_child[0]);
    Channel ch{to_child[0], from_child[1]};
    int rc = body(ch);
    _exit(rc);
  }
  close(to_child[0]);
  close(from_child[1]);
  return Child{pid, Channel{from_child[0], to_child[1]}};
}

// In a child: returns `code` from the body when `cond` fails.
#define CHILD_CHECK(cond, code)                                                  \
  do {                                                                           \
    if (!(cond)) {                                                               \
      std::fprintf(stderr, "child check failed at line %d: %s\n", __LINE__, #cond); \
      return code;                                                               \
    }                                                                            \
  } while (0)

class FakeCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fake-cuda-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    setenv("FAKE_CUDA_STATE_DIR", (dir_ + "/state").c_str(), 1);
    unsetenv("FAKE_CUDA_CONFIG");
    unsetenv("FAKE_CUDA_ALLOC_DELAY_US");
    unsetenv("FAKE_CUDA_KERNEL_US");
    cu().reset();
  }

  void TearDown() override {
    cu().reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  void configure(const std::string& text) {
    std::string path = dir_ + "/devices.conf";
    std::ofstream(path) << text;
    setenv("FAKE_CUDA_CONFIG", path.c_str(), 1);
  }

  // cuInit, then the primary context of device 0 made current.
  CUcontext init_and_retain() {
    EXPECT_EQ(cu().Init(0), CUDA_SUCCESS);
    CUcontext ctx = nullptr;
    EXPECT_EQ(cu().DevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    EXPECT_EQ(cu().CtxSetCurrent(ctx), CUDA_SUCCESS);
    return ctx;
  }

  CUfunction function(const char* name) {
    CUmodule module = nullptr;
    static const char kImage[] = "any image";
    EXPECT_EQ(cu().ModuleLoadData(&module, kImage), CUDA_SUCCESS);
    CUfunction f = nullptr;
    EXPECT_EQ(cu().ModuleGetFunction(&f, module, name), CUDA_SUCCESS);
    return f;
  }

  CUresult launch(CUfunction f, CUstream s) {
    return cu().LaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, nullptr, nullptr);
  }

  size_t free_memory() {
    size_t free = 0, total = 0;
    EXPECT_EQ(cu().MemGetInfo(&free, &total), CUDA_SUCCESS);
    return free;
  }

  uint64_t pool_attribute(CUmemoryPool pool, CUmemPool_attribute attr) {
    cuuint64_t v = 0;
    EXPECT_EQ(cu().MemPoolGetAttribute(pool, attr, &v), CUDA_SUCCESS);
    return v;
  }

  std::string dir_;
};

// -- devices and configuration --------------------------------------------------------------------

TEST_F(FakeCuda, DevicesComeFromTheConfigFile) {
  configure(
      "# two GPUs\n"
      "device name=\"NVIDIA H100 80GB HBM3\" uuid=GPU-3f1c0a2b-9d4e-4c1a-8e7f-0123456789ab memory_mib=81559 "
      "sms=132 cc=9.0 pci=0000:17:00.0\n"
      "\n"
      "device name=\"NVIDIA A100-SXM4-40GB\" uuid=GPU-00112233-4455-6677-8899-aabbccddeeff memory_mib=40960 sms=108 "
      "cc=8.0   # a comment\n");
  ASSERT_EQ(cu().Init(0), CUDA_SUCCESS);
  int count = 0;
  ASSERT_EQ(cu().DeviceGetCount(&count), CUDA_SUCCESS);
  ASSERT_EQ(count, 2);

  char name[64];
  ASSERT_EQ(cu().DeviceGetName(name, sizeof name, 1), CUDA_SUCCESS);
  EXPECT_STREQ(name, "NVIDIA A100-SXM4-40GB");
  CUuuid uuid;
  ASSERT_EQ(cu().DeviceGetUuid(&uuid, 0), CUDA_SUCCESS);
  const unsigned char expected[16] = {0x3f, 0x1c, 0x0a, 0x2b, 0x9d, 0x4e, 0x4c, 0x1a,
                                      0x8e, 0x7f, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab};
  EXPECT_EQ(std::memcmp(uuid.bytes, expected, 16), 0);
  size_t total = 0;
  ASSERT_EQ(cu().DeviceTotalMem(&total, 1), CUDA_SUCCESS);
  EXPECT_EQ(total, 40960 * kMiB);
  int major = 0, minor = -1, sms = 0;
  ASSERT_EQ(cu().DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 1), CUDA_SUCCESS);
  ASSERT_EQ(cu().DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 1), CUDA_SUCCESS);
  ASSERT_EQ(cu().DeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0), CUDA_SUCCESS);
  EXPECT_EQ(major, 8);
  EXPECT_EQ(minor, 0);
  EXPECT_EQ(sms, 132);
  char bus[32];
  ASSERT_EQ(cu().DeviceGetPCIBusId(bus, sizeof bus, 0), CUDA_SUCCESS);
  EXPECT_STREQ(bus, "0000:17:00.0");
  CUdevice dev;
  EXPECT_EQ(cu().DeviceGet(&dev, 2), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cu().DeviceGetName(name, sizeof name, 7), CUDA_ERROR_INVALID_DEVICE);
  int value = 0;
  EXPECT_EQ(cu().DeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(FakeCuda, WithoutAConfigThereIsOneH100) {
  ASSERT_EQ(cu().Init(0), CUDA_SUCCESS);
  int count = 0;
  ASSERT_EQ(cu().DeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 1);
  char name[64];
  ASSERT_EQ(cu().DeviceGetName(name, sizeof name, 0), CUDA_SUCCESS);
  EXPECT_STREQ(name, "NVIDIA H100 80GB HBM3");
  size_t total = 0;
  ASSERT_EQ(cu().DeviceTotalMem(&total, 0), CUDA_SUCCESS);
  EXPECT_EQ(total, 81559 * kMiB);
  int version = 0;
  ASSERT_EQ(cu().DriverGetVersion(&version), CUDA_SUCCESS);
  EXPECT_EQ(version, 13000);
}

TEST_F(FakeCuda, BadConfigLineFailsCuInitNamingTheLine) {
  configure("device name=ok\ndevice memory_mib=lots\n");
  testing::internal::CaptureStderr();
  EXPECT_EQ(cu().Init(0), CUDA_ERROR_INVALID_VALUE);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, HasSubstr("devices.conf:2"));
  EXPECT_THAT(err, HasSubstr("memory_mib \"lots\""));
  EXPECT_EQ(cu().Init(0), CUDA_ERROR_INVALID_VALUE);  // the result is kept, as the driver's is
  int count = 0;
  EXPECT_EQ(cu().DeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);

  cu().reset();
  configure("device uuid=GPU-nothex\n");
  testing::internal::CaptureStderr();
  EXPECT_EQ(cu().Init(0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_THAT(testing::internal::GetCapturedStderr(), HasSubstr("uuid \"GPU-nothex\""));

  cu().reset();
  configure("# nothing here\n");
  testing::internal::CaptureStderr();
  EXPECT_EQ(cu().Init(0), CUDA_ERROR_NO_DEVICE);
  testing::internal::GetCapturedStderr();
}

TEST_F(FakeCuda, CallsBeforeCuInitReturnNotInitialized) {
  int count = 0;
  EXPECT_EQ(cu().DeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
  CUdeviceptr p = 0;
  EXPECT_EQ(cu().MemAlloc(&p, 16), CUDA_ERROR_NOT_INITIALIZED);
  CUcontext ctx;
  EXPECT_EQ(cu().CtxGetCurrent(&ctx), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cu().Init(1), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(FakeCuda, ErrorNamesAndStrings) {
  const char* s = nullptr;
  ASSERT_EQ(cu().GetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "CUDA_ERROR_OUT_OF_MEMORY");
  ASSERT_EQ(cu().GetErrorString(CUDA_ERROR_INVALID_VALUE, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "invalid argument");
  EXPECT_EQ(cu().GetErrorName(static_cast<CUresult>(12345), &s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(s, nullptr);
}

// -- contexts -------------------------------------------------------------------------------------

TEST_F(FakeCuda, CurrentContextIsPerThreadStack) {
  ASSERT_EQ(cu().Init(0), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  EXPECT_EQ(cu().MemAlloc(&p, 16), CUDA_ERROR_INVALID_CONTEXT);
  CUcontext primary = nullptr, again = nullptr, current = nullptr;
  ASSERT_EQ(cu().DevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
  ASSERT_EQ(cu().DevicePrimaryCtxRetain(&again, 0), CUDA_SUCCESS);
  EXPECT_EQ(primary, again);
  unsigned flags = 0;
  int active = 0;
  ASSERT_EQ(cu().DevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 1);
  ASSERT_EQ(cu().CtxPushCurrent(primary), CUDA_SUCCESS);
  CUcontext own = nullptr;
  ASSERT_EQ(cu().CtxCreate(&own, 0, 0), CUDA_SUCCESS);  // pushed
  ASSERT_EQ(cu().CtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, own);
  std::thread([&] {
    CUcontext there = reinterpret_cast<CUcontext>(1);
    EXPECT_EQ(cu().CtxGetCurrent(&there), CUDA_SUCCESS);
    EXPECT_EQ(there, nullptr);
    CUdevice dev;
    EXPECT_EQ(cu().CtxGetDevice(&dev), CUDA_ERROR_INVALID_CONTEXT);
  }).join();
  ASSERT_EQ(cu().CtxDestroy(own), CUDA_SUCCESS);  // popped: the primary is current again
  ASSERT_EQ(cu().CtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, primary);
  EXPECT_EQ(cu().CtxDestroy(own), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(cu().CtxPopCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, primary);
  EXPECT_EQ(cu().CtxPopCurrent(&current), CUDA_ERROR_INVALID_CONTEXT);

  // The primary context's last release destroys it; a thread that has it current is told so.
  ASSERT_EQ(cu().CtxSetCurrent(primary), CUDA_SUCCESS);
  ASSERT_EQ(cu().MemAlloc(&p, 16), CUDA_SUCCESS);
  ASSERT_EQ(cu().DevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  ASSERT_EQ(cu().DevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  EXPECT_EQ(cu().DevicePrimaryCtxRelease(0), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cu().MemAlloc(&p, 16), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  EXPECT_EQ(cu().used_bytes(0), 0u);  // its memory went with it
  ASSERT_EQ(cu().DevicePrimaryCtxRetain(&again, 0), CUDA_SUCCESS);
  EXPECT_EQ(again, primary);
  EXPECT_EQ(cu().MemAlloc(&p, 16), CUDA_SUCCESS);
}

// -- memory ---------------------------------------------------------------------------------------

TEST_F(FakeCuda, AllocationsHoldBytesAndAreCountedIn2MiB) {
  init_and_retain();
  size_t free_before = free_memory();
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cu().MemAlloc(&a, 3 * kMiB + 1), CUDA_SUCCESS);
  EXPECT_EQ(free_before - free_memory(), 4 * kMiB);
  EXPECT_EQ(cu().used_bytes(0), 4 * kMiB);
  ASSERT_EQ(cu().MemAlloc(&b, 4096), CUDA_SUCCESS);
  EXPECT_EQ(cu().used_bytes(0), 6 * kMiB);

  std::vector<unsigned char> in(4096), out(4096, 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i * 7);
  ASSERT_EQ(cu().MemcpyHtoD(a + 100, in.data(), in.size()), CUDA_SUCCESS);
  ASSERT_EQ(cu().MemcpyDtoD(b, a + 100, in.size()), CUDA_SUCCESS);
  ASSERT_EQ(cu().MemcpyDtoH(out.data(), b, out.size()), CUDA_SUCCESS);
  EXPECT_EQ(in, out);
  ASSERT_EQ(cu().MemsetD8(b, 0xAB, 16), CUDA_SUCCESS);
  ASSERT_EQ(cu().Memcpy(reinterpret_cast<CUdeviceptr>(out.data()), b, 16), CUDA_SUCCESS);  // unified addressing
  EXPECT_EQ(out[15], 0xAB);

  CUdeviceptr base = 0;
  size_t size = 0;
  ASSERT_EQ(cu().MemGetAddressRange(&base, &size, a + 12345), CUDA_SUCCESS);
  EXPECT_EQ(base, a);
  EXPECT_EQ(size, 3 * kMiB + 1);
  EXPECT_EQ(cu().MemGetAddressRange(&base, &size, 16), CUDA_ERROR_NOT_FOUND);

  EXPECT_EQ(cu().MemcpyHtoD(b + 4000, in.data(), 200), CUDA_ERROR_INVALID_VALUE);  // past the end
  EXPECT_EQ(cu().MemcpyDtoH(out.data(), reinterpret_cast<CUdeviceptr>(in.data()), 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cu().MemFree(a + 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cu().MemAlloc(&a, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cu().MemAlloc(nullptr, 16), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cu().MemFree(a), CUDA_SUCCESS);
  EXPECT_EQ(cu().MemFree(a), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cu().MemFree(b), CUDA_SUCCESS);
  EXPECT_EQ(free_memory(), free_before);

  size_t pitch = 0;
  ASSERT_EQ(cu().MemAllocPitch(&a, &pitch, 1000, 10, 4), CUDA_SUCCESS);
  EXPECT_EQ(pitch, 1024u);
  ASSERT_EQ(cu().MemGetAddressRange(nullptr, &size, a), CUDA_SUCCESS);
  EXPECT_EQ(size, 10240u);
  EXPECT_EQ(cu().MemAllocPitch(&b, &pitch, 1000, 10, 3), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cu().MemAllocManaged(&b, 100, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(cu().used_bytes(0), 4 * kMiB);
  EXPECT_EQ(cu().MemAllocManaged(&b, 100, 0), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(FakeCuda, LegacyCuMemAllocReturns32BitPointers) {
  init_and_retain();
  void* p = nullptr;
  CUdriverProcAddressQueryResult status;
  ASSERT_EQ(cu().GetProcAddress("cuMemAlloc", &p, 2000, 0, &status), CUDA_SUCCESS);
  using AllocV1 = CUresult (*)(unsigned int* dptr, unsigned int bytesize);  // cuda.h declares it internally only
  auto alloc_v1 = reinterpret_cast<AllocV1>(p);
  unsigned int small = 0;
  ASSERT_EQ(alloc_v1(&small, 4096), CUDA_SUCCESS);
  EXPECT_NE(small, 0u);
  unsigned char byte = 42;
  EXPECT_EQ(cu().MemcpyHtoD(small, &byte, 1), CUDA_SUCCESS);
  EXPECT_EQ(cu().MemFree(small), CUDA_SUCCESS);
}

TEST_F(FakeCuda, OutOfMemoryAtTheDeviceLimit) {
  configure("device memory_mib=64\n");
  init_and_retain();
  CUdeviceptr a = 0, b = 0, c = 0;
  ASSERT_EQ(cu().MemAlloc(&a, 32 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(cu().MemAlloc(&b, 29 * kMiB + 5), CUDA_SUCCESS);  // counted as 30 MiB
  EXPECT_EQ(cu().MemAlloc(&c, 2 * kMiB + 1), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cu().MemAlloc(&c, 1ull << 40), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(cu().MemAlloc(&c, 1), CUDA_SUCCESS);  // the last 2 MiB
  EXPECT_EQ(free_memory(), 0u);
  EXPECT_EQ(cu().MemAlloc(&c, 1), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(cu().MemFree(a), CUDA_SUCCESS);
  EXPECT_EQ(cu().MemAlloc(&a, 32 * kMiB), CUDA_SUCCESS);
}

TEST_F(FakeCuda, MemoryIsCountedAcrossProcessesAndComesBackWhenOneIsKilled) {
  configure("device memory_mib=64\n");
  init_and_retain();
  CUdeviceptr mine = 0;
  ASSERT_EQ(cu().MemAlloc(&mine, 16 * kMiB), CUDA_SUCCESS);

  Child child = spawn([](const Channel& ch) {
    int count = 0;
    CHILD_CHECK(cu().DeviceGetCount(&count) == CUDA_ERROR_NOT_INITIALIZED, 2);  // a fresh driver
    CUcontext ctx;
    CHILD_CHECK(cu().Init(0) == CUDA_SUCCESS, 3);
    CHILD_CHECK(cu().DevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS && cu().CtxSetCurrent(ctx) == CUDA_SUCCESS, 4);
    size_t free = 0, total = 0;
    CHILD_CHECK(cu().MemGetInfo(&free, &total) == CUDA_SUCCESS && free == 48 * kMiB, 5);
    CUdeviceptr p = 0;
    CHILD_CHECK(cu().MemAlloc(&p, 40 * kMiB) == CUDA_SUCCESS, 6);
    CHILD_CHECK(cu().MemAlloc(&p, 10 * kMiB) == CUDA_ERROR_OUT_OF_MEMORY, 7);
    ch.put_u64(1);
    ch.get_u64();  // killed while waiting here
    return 0;
  });
  ASSERT_EQ(child.channel.get_u64(), 1u);
  EXPECT_EQ(cu().used_bytes(0), 56 * kMiB);
  EXPECT_EQ(cu().process_used_bytes(0, child.pid), 40 * kMiB);
  EXPECT_EQ(free_memory(), 8 * kMiB);
  CUdeviceptr more = 0;
  EXPECT_EQ(cu().MemAlloc(&more, 16 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);

  kill(child.pid, SIGKILL);  // not reaped yet: a zombie's memory is free too
  EXPECT_TRUE(eventually([] { return cu().used_bytes(0) == 16 * kMiB; }));
  EXPECT_EQ(cu().MemAlloc(&more, 40 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(child.wait(), 128 + SIGKILL);
}

TEST_F(FakeCuda, ProcessKilledMidAllocationGivesItsMemoryBack) {
  configure("device memory_mib=64\n");
  init_and_retain();
  setenv("FAKE_CUDA_ALLOC_DELAY_US", "20000000", 1);  // 20 s: the child is killed long before
  Child child = spawn([](const Channel& ch) {
    CUcontext ctx;
    CHILD_CHECK(cu().Init(0) == CUDA_SUCCESS, 3);
    CHILD_CHECK(cu().DevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS && cu().CtxSetCurrent(ctx) == CUDA_SUCCESS, 4);
    ch.put_u64(1);
    CUdeviceptr p = 0;
    cu().MemAlloc(&p, 24 * kMiB);
    return 0;
  });
  unsetenv("FAKE_CUDA_ALLOC_DELAY_US");
  ASSERT_EQ(child.channel.get_u64(), 1u);
  EXPECT_TRUE(eventually([] { return cu().used_bytes(0) == 24 * kMiB; }));  // counted, still sleeping
  kill(child.pid, SIGKILL);
  EXPECT_TRUE(eventually([] { return cu().used_bytes(0) == 0; }));
  EXPECT_EQ(child.wait(), 128 + SIGKILL);
}

// -- arrays ---------------------------------------------------------------------------------------

TEST_F(FakeCuda, ArraysCountTheirDescriptorSizeInDeviceMemory) {
  init_and_retain();
  CUDA_ARRAY_DESCRIPTOR desc{};
  desc.Width = 100;
  desc.Height = 100;
  desc.Format = CU_AD_FORMAT_FLOAT;
  desc.NumChannels = 4;
  CUarray array = nullptr;
  ASSERT_EQ(cu().ArrayCreate(&array, &desc), CUDA_SUCCESS);
  CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
  ASSERT_EQ(cu().ArrayGetMemoryRequirements(&req, array, 0), CUDA_SUCCESS);
  EXPECT_EQ(req.size, 196608u);  // 160000 bytes rounded up to 64 KiB
  EXPECT_EQ(req.alignment, 65536u);
  EXPECT_EQ(cu().used_bytes(0), req.size);
  CUDA_ARRAY_DESCRIPTOR back{};
  ASSERT_EQ(cu().ArrayGetDescriptor(&back, array), CUDA_SUCCESS);
  EXPECT_EQ(back.Width, 100u);
  EXPECT_EQ(back.NumChannels, 4u);

  CUDA_ARRAY3D_DESCRIPTOR desc3{};
  desc3.Width = 64;
  desc3.Height = 64;
  desc3.Depth = 64;
  desc3.Format = CU_AD_FORMAT_HALF;
  desc3.NumChannels = 2;
  CUarray volume = nullptr;
  ASSERT_EQ(cu().Array3DCreate(&volume, &desc3), CUDA_SUCCESS);
  EXPECT_EQ(cu().used_bytes(0), 196608u + 64 * 64 * 64 * 4);

  CUDA_ARRAY3D_DESCRIPTOR mip{};
  mip.Width = 256;
  mip.Height = 256;
  mip.Format = CU_AD_FORMAT_UNSIGNED_INT8;
  mip.NumChannels = 1;
  CUmipmappedArray mipmap = nullptr;
  EXPECT_EQ(cu().MipmappedArrayCreate(&mipmap, &mip, 10), CUDA_ERROR_INVALID_VALUE);  // 256: at most 9 levels
  ASSERT_EQ(cu().MipmappedArrayCreate(&mipmap, &mip, 3), CUDA_SUCCESS);
  ASSERT_EQ(cu().MipmappedArrayGetMemoryRequirements(&req, mipmap, 0), CUDA_SUCCESS);
  EXPECT_EQ(req.size, 3 * 65536u);  // 65536 + 16384 + 4096, each level rounded up to 64 KiB

  ASSERT_EQ(cu().ArrayDestroy(array), CUDA_SUCCESS);
  ASSERT_EQ(cu().ArrayDestroy(volume), CUDA_SUCCESS);
  ASSERT_EQ(cu().MipmappedArrayDestroy(mipmap), CUDA_SUCCESS);
  EXPECT_EQ(cu().used_bytes(0), 0u);
  EXPECT_EQ(cu().ArrayDestroy(array), CUDA_ERROR_INVALID_HANDLE);
  desc.Width = 0;
  EXPECT_EQ(cu().ArrayCreate(&array, &desc), CUDA_ERROR_INVALID_VALUE);
}

// -- stream-ordered allocation --------------------------------------------------------------------

TEST_F(FakeCuda, PoolsReserveChunksAndReleaseThemAtSynchronize) {
  init_and_retain();
  CUmemoryPool pool = nullptr, current = nullptr;
  ASSERT_EQ(cu().DeviceGetDefaultMemPool(&pool, 0), CUDA_SUCCESS);
  ASSERT_EQ(cu().DeviceGetMemPool(&current, 0), CUDA_SUCCESS);
  EXPECT_EQ(pool, current);
  CUstream stream = nullptr;
  ASSERT_EQ(cu().StreamCreate(&stream, 0), CUDA_SUCCESS);

  CUdeviceptr a = 0;
  ASSERT_EQ(cu().MemAllocAsync(&a, 1 * kMiB, stream), CUDA_SUCCESS);
  EXPECT_EQ(pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 2 * kMiB);
  EXPECT_EQ(pool_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 2 * kMiB);
  EXPECT_EQ(cu().used_bytes(0), 2 * kMiB);
  ASSERT_EQ(cu().MemFreeAsync(a, stream), CUDA_SUCCESS);
  EXPECT_EQ(pool_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 0u);
  EXPECT_EQ(pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 2 * kMiB);  // freed, still reserved
  EXPECT_EQ(cu().used_bytes(0), 2 * kMiB);
  CUdeviceptr again = 0;
  ASSERT_EQ(cu().MemAllocAsync(&again, 512 * 1024, stream), CUDA_SUCCESS);  // reuses the free chunk
  EXPECT_EQ(again, a);
  EXPECT_EQ(pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 2 * kMiB);
  ASSERT_EQ(cu().MemFreeAsync(again, stream), CUDA_SUCCESS);
  ASSERT_EQ(cu().StreamSynchronize(stream), CUDA_SUCCESS);  // threshold 0: everything free goes
  EXPECT_EQ(pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0u);
  EXPECT_EQ(cu().used_bytes(0), 0u);

  cuuint64_t threshold = 4 * kMiB;
  ASSERT_EQ(cu().MemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold), CUDA_SUCCESS);
  CUdeviceptr p[3];
  for (auto& x : p) ASSERT_EQ(cu().MemAllocAsync(&x, 1 * kMiB, stream), CUDA_SUCCESS);
  EXPECT_EQ(pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 6 * kMiB);
  for (auto& x : p) ASSERT_EQ(cu().MemFreeAsync(x, stream), CUDA_SUCCESS);
  ASSERT_EQ(cu().CtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 4 * kMiB);  // down to the threshold
  EXPECT_EQ(pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 6 * kMiB);
  EXPECT_EQ(pool_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 6 * kMiB);
  EXPECT_EQ(cu().used_bytes(0), 4 * kMiB);
  ASSERT_EQ(cu().MemPoolTrimTo(pool, 0), CUDA_SUCCESS);
  EXPECT_EQ(pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0u);
  EXPECT_EQ(cu().used_bytes(0), 0u);
  cuuint64_t zero = 0, seven = 7;
  ASSERT_EQ(cu().MemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero), CUDA_SUCCESS);
  EXPECT_EQ(pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 0u);
  EXPECT_EQ(cu().MemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &seven), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cu().MemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &zero), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cu().MemPoolDestroy(pool), CUDA_ERROR_INVALID_VALUE);  // the default pool stays
}

TEST_F(FakeCuda, CreatedPoolsServeAllocationsAndCanBeTheDevicePool) {
  init_and_retain();
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CUmemoryPool pool = nullptr, current = nullptr;
  ASSERT_EQ(cu().MemPoolCreate(&pool, &props), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(cu().MemAllocFromPoolAsync(&p, 3 * kMiB, pool, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 4 * kMiB);
  EXPECT_EQ(cu().used_bytes(0), 4 * kMiB);
  ASSERT_EQ(cu().MemFree(p), CUDA_SUCCESS);  // cuMemFree takes stream-ordered memory too
  ASSERT_EQ(cu().DeviceSetMemPool(0, pool), CUDA_SUCCESS);
  ASSERT_EQ(cu().DeviceGetMemPool(&current, 0), CUDA_SUCCESS);
  EXPECT_EQ(current, pool);
  ASSERT_EQ(cu().MemAllocAsync(&p, kMiB, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(pool_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 4 * kMiB);  // the free 4 MiB chunk
  ASSERT_EQ(cu().MemPoolDestroy(pool), CUDA_SUCCESS);  // outstanding: goes at the last free
  ASSERT_EQ(cu().DeviceGetMemPool(&current, 0), CUDA_SUCCESS);
  EXPECT_NE(current, pool);
  EXPECT_EQ(cu().used_bytes(0), 4 * kMiB);
  ASSERT_EQ(cu().MemFreeAsync(p, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cu().used_bytes(0), 0u);
  EXPECT_EQ(cu().MemFreeAsync(p, nullptr), CUDA_ERROR_INVALID_VALUE);
}

// -- virtual memory management --------------------------------------------------------------------

TEST_F(FakeCuda, VmmAllocationExportedToAnotherProcessShowsTheSameBytes) {
  init_and_retain();
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t granularity = 0;
  ASSERT_EQ(cu().MemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  ASSERT_EQ(granularity, 2 * kMiB);
  CUmemGenericAllocationHandle handle = 0;
  EXPECT_EQ(cu().MemCreate(&handle, 3 * kMiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cu().MemCreate(&handle, 4 * kMiB, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(cu().used_bytes(0), 4 * kMiB);
  CUmemAllocationProp back{};
  ASSERT_EQ(cu().MemGetAllocationPropertiesFromHandle(&back, handle), CUDA_SUCCESS);
  EXPECT_EQ(back.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);

  CUdeviceptr va = 0;
  ASSERT_EQ(cu().MemAddressReserve(&va, 8 * kMiB, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cu().MemMap(va, 4 * kMiB, 0, handle, 0), CUDA_SUCCESS);
  EXPECT_EQ(cu().MemMap(va + 2 * kMiB, 2 * kMiB, 0, handle, 0), CUDA_ERROR_INVALID_VALUE);  // already mapped
  const char text[] = "written before cuMemSetAccess?";
  EXPECT_EQ(cu().MemcpyHtoD(va, text, sizeof text), CUDA_ERROR_INVALID_VALUE);  // no access yet
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  EXPECT_EQ(cu().MemSetAccess(va, 8 * kMiB, &access, 1), CUDA_ERROR_INVALID_VALUE);  // half unmapped
  ASSERT_EQ(cu().MemSetAccess(va, 4 * kMiB, &access, 1), CUDA_SUCCESS);
  std::strcpy(reinterpret_cast<char*>(va + 3 * kMiB), "from the exporter");
  CUmemGenericAllocationHandle retained = 0;
  ASSERT_EQ(cu().MemRetainAllocationHandle(&retained, reinterpret_cast<void*>(va + 5)), CUDA_SUCCESS);
  EXPECT_EQ(retained, handle);
  ASSERT_EQ(cu().MemRelease(retained), CUDA_SUCCESS);

  int fd = -1;
  ASSERT_EQ(cu().MemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
  ASSERT_GE(fd, 0);
  Child child = spawn([fd](const Channel& ch) {  // the fd travels by fork, as it could by SCM_RIGHTS
    CUcontext ctx;
    CHILD_CHECK(cu().Init(0) == CUDA_SUCCESS, 3);
    CHILD_CHECK(cu().DevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS && cu().CtxSetCurrent(ctx) == CUDA_SUCCESS, 4);
    CUmemGenericAllocationHandle h = 0;
    CHILD_CHECK(cu().MemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == CUDA_SUCCESS,
                5);
    CUdeviceptr p = 0;
    CHILD_CHECK(cu().MemAddressReserve(&p, 4 * kMiB, 0, 0, 0) == CUDA_SUCCESS, 6);
    CHILD_CHECK(cu().MemMap(p, 4 * kMiB, 0, h, 0) == CUDA_SUCCESS, 7);
    CUmemAccessDesc a{};
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = 0;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CHILD_CHECK(cu().MemSetAccess(p, 4 * kMiB, &a, 1) == CUDA_SUCCESS, 8);
    char seen[32] = {};
    CHILD_CHECK(cu().MemcpyDtoH(seen, p + 3 * kMiB, sizeof seen) == CUDA_SUCCESS, 9);
    CHILD_CHECK(std::strcmp(seen, "from the exporter") == 0, 10);
    const char reply[] = "from the importer";
    CHILD_CHECK(cu().MemcpyHtoD(p + 1 * kMiB, reply, sizeof reply) == CUDA_SUCCESS, 11);
    CHILD_CHECK(cu().process_used_bytes(0, getpid()) == 0, 12);  // counted to its creator only
    ch.put_u64(1);
    return 0;
  });
  ASSERT_EQ(child.channel.get_u64(), 1u);
  EXPECT_EQ(child.wait(), 0);
  close(fd);
  EXPECT_STREQ(reinterpret_cast<const char*>(va + 1 * kMiB), "from the importer");

  ASSERT_EQ(cu().MemRelease(handle), CUDA_SUCCESS);
  EXPECT_EQ(cu().used_bytes(0), 4 * kMiB);  // still mapped
  EXPECT_EQ(cu().MemUnmap(va, 2 * kMiB), CUDA_ERROR_INVALID_VALUE);  // part of a mapping
  ASSERT_EQ(cu().MemUnmap(va, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(cu().used_bytes(0), 0u);
  EXPECT_EQ(cu().MemRelease(handle), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cu().MemAddressFree(va, 8 * kMiB), CUDA_SUCCESS);
}

// -- IPC ------------------------------------------------------------------------------------------

TEST_F(FakeCuda, IpcMemHandleOpensInAnotherProcessWithTheSameBytes) {
  init_and_retain();
  CUdeviceptr p = 0;
  ASSERT_EQ(cu().MemAlloc(&p, 1 * kMiB), CUDA_SUCCESS);
  const char text[] = "shared through IPC";
  ASSERT_EQ(cu().MemcpyHtoD(p + 100, text, sizeof text), CUDA_SUCCESS);
  CUipcMemHandle handle;
  ASSERT_EQ(cu().IpcGetMemHandle(&handle, p), CUDA_SUCCESS);
  CUdeviceptr self = 0;
  EXPECT_EQ(cu().IpcOpenMemHandle(&self, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_INVALID_CONTEXT);

  Child child = spawn([](const Channel& ch) {
    CUipcMemHandle h;
    CHILD_CHECK(ch.get(&h, sizeof h), 2);
    CUcontext ctx;
    CHILD_CHECK(cu().Init(0) == CUDA_SUCCESS, 3);
    CHILD_CHECK(cu().DevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS && cu().CtxSetCurrent(ctx) == CUDA_SUCCESS, 4);
    CUdeviceptr q = 0, q2 = 0;
    CHILD_CHECK(cu().IpcOpenMemHandle(&q, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS, 5);
    CHILD_CHECK(cu().IpcOpenMemHandle(&q2, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS && q2 == q, 6);
    char seen[32] = {};
    CHILD_CHECK(cu().MemcpyDtoH(seen, q + 100, sizeof "shared through IPC") == CUDA_SUCCESS, 7);
    CHILD_CHECK(std::strcmp(seen, "shared through IPC") == 0, 8);
    CHILD_CHECK(cu().MemsetD8(q, 0x5A, 10) == CUDA_SUCCESS, 9);
    CHILD_CHECK(cu().IpcCloseMemHandle(q) == CUDA_SUCCESS && cu().IpcCloseMemHandle(q) == CUDA_SUCCESS, 10);
    CHILD_CHECK(cu().IpcCloseMemHandle(q) == CUDA_ERROR_INVALID_VALUE, 11);
    CHILD_CHECK(cu().used_bytes(0) == 2 * kMiB, 12);  // the exporter's allocation, counted once
    ch.put_u64(1);
    return 0;
  });
  ASSERT_TRUE(child.channel.put(&handle, sizeof handle));
  ASSERT_EQ(child.channel.get_u64(), 1u);
  EXPECT_EQ(child.wait(), 0);
  unsigned char first[10];
  ASSERT_EQ(cu().MemcpyDtoH(first, p, sizeof first), CUDA_SUCCESS);
  EXPECT_EQ(first[9], 0x5A);
}

TEST_F(FakeCuda, IpcEventCompletesInAnotherProcessWhenTheExporterWorkDoes) {
  init_and_retain();
  CUevent event = nullptr;
  EXPECT_EQ(cu().EventCreate(&event, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);  // needs DISABLE_TIMING
  ASSERT_EQ(cu().EventCreate(&event, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  CUstream stream = nullptr;
  ASSERT_EQ(cu().StreamCreate(&stream, 0), CUDA_SUCCESS);
  ASSERT_EQ(launch(function("spin_300000us"), stream), CUDA_SUCCESS);  // 300 ms
  ASSERT_EQ(cu().EventRecord(event, stream), CUDA_SUCCESS);
  CUipcEventHandle handle;
  ASSERT_EQ(cu().IpcGetEventHandle(&handle, event), CUDA_SUCCESS);
  const uint64_t done_at = cu().busy_until_ns(0);

  Child child = spawn([done_at](const Channel& ch) {
    CUipcEventHandle h;
    CHILD_CHECK(ch.get(&h, sizeof h), 2);
    CUcontext ctx;
    CHILD_CHECK(cu().Init(0) == CUDA_SUCCESS, 3);
    CHILD_CHECK(cu().DevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS && cu().CtxSetCurrent(ctx) == CUDA_SUCCESS, 4);
    CUevent e = nullptr;
    CHILD_CHECK(cu().IpcOpenEventHandle(&e, h) == CUDA_SUCCESS, 5);
    const uint64_t before = now_ns();
    const CUresult q = cu().EventQuery(e);
    CHILD_CHECK(q == CUDA_SUCCESS ? now_ns() >= done_at : (q == CUDA_ERROR_NOT_READY && before < done_at), 6);
    CHILD_CHECK(cu().EventSynchronize(e) == CUDA_SUCCESS, 7);
    CHILD_CHECK(now_ns() >= done_at, 8);
    CHILD_CHECK(cu().EventQuery(e) == CUDA_SUCCESS, 9);
    ch.put_u64(1);
    return 0;
  });
  ASSERT_TRUE(child.channel.put(&handle, sizeof handle));
  ASSERT_EQ(child.channel.get_u64(), 1u);
  EXPECT_EQ(child.wait(), 0);
  EXPECT_EQ(cu().EventDestroy(event), CUDA_SUCCESS);
}

// -- streams, events and the kernel timeline ------------------------------------------------------

TEST_F(FakeCuda, TwoKernelsOnTwoStreamsRunOneAfterTheOther) {
  init_and_retain();
  CUfunction spin = function("spin_1000us");
  CUstream s1 = nullptr, s2 = nullptr;
  ASSERT_EQ(cu().StreamCreate(&s1, 0), CUDA_SUCCESS);
  ASSERT_EQ(cu().StreamCreate(&s2, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  const uint64_t start = now_ns();
  ASSERT_EQ(launch(spin, s1), CUDA_SUCCESS);
  ASSERT_EQ(launch(spin, s2), CUDA_SUCCESS);
  ASSERT_EQ(cu().StreamSynchronize(s1), CUDA_SUCCESS);
  ASSERT_EQ(cu().StreamSynchronize(s2), CUDA_SUCCESS);
  EXPECT_GE(now_ns() - start, 2'000'000u);  // one kernel at a time
  EXPECT_EQ(cu().StreamQuery(s1), CUDA_SUCCESS);
  EXPECT_EQ(cu().busy_ns(0, getpid()), 2'000'000u);
  EXPECT_EQ(cu().busy_ns(0, 0), 2'000'000u);
  EXPECT_EQ(cu().launches(0, getpid()), 2u);
  ASSERT_EQ(cu().StreamDestroy(s1), CUDA_SUCCESS);
  ASSERT_EQ(cu().StreamDestroy(s2), CUDA_SUCCESS);
  EXPECT_EQ(cu().StreamDestroy(s2), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(FakeCuda, QueriesSeeQueuedWorkAndEventsTimeIt) {
  init_and_retain();
  CUevent begin = nullptr, end = nullptr;
  ASSERT_EQ(cu().EventCreate(&begin, 0), CUDA_SUCCESS);
  ASSERT_EQ(cu().EventCreate(&end, 0), CUDA_SUCCESS);
  float ms = 0;
  EXPECT_EQ(cu().EventElapsedTime(&ms, begin, end), CUDA_ERROR_INVALID_HANDLE);  // never recorded
  EXPECT_EQ(cu().EventQuery(end), CUDA_SUCCESS);
  ASSERT_EQ(cu().EventRecord(begin, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(launch(function("spin_100000us"), nullptr), CUDA_SUCCESS);  // 100 ms on the NULL stream
  ASSERT_EQ(cu().EventRecord(end, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cu().StreamQuery(nullptr), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cu().EventQuery(end), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cu().EventElapsedTime(&ms, begin, end), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(cu().EventSynchronize(end), CUDA_SUCCESS);
  EXPECT_EQ(cu().StreamQuery(nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cu().EventElapsedTime(&ms, begin, end), CUDA_SUCCESS);
  EXPECT_GE(ms, 100.0f);
  EXPECT_LT(ms, 150.0f);
  CUevent untimed = nullptr;
  ASSERT_EQ(cu().EventCreate(&untimed, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(cu().EventRecord(untimed, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cu().EventElapsedTime(&ms, begin, untimed), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(cu().EventDestroy(untimed), CUDA_SUCCESS);
  EXPECT_EQ(cu().EventDestroy(untimed), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(FakeCuda, PerThreadDefaultStreamIsTheCallingThreadsOwn) {
  init_and_retain();
  CUfunction spin = function("spin_100000us");
  ASSERT_EQ(cu().LaunchKernel_ptsz(spin, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cu().StreamQuery_ptsz(nullptr), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cu().StreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
  CUstream independent = nullptr;
  ASSERT_EQ(cu().StreamCreate(&independent, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  EXPECT_EQ(cu().StreamQuery(independent), CUDA_SUCCESS);
  std::thread([&] {
    ASSERT_EQ(cu().CtxSetCurrent([] {
      CUcontext c = nullptr;
      cu().DevicePrimaryCtxRetain(&c, 0);
      return c;
    }()), CUDA_SUCCESS);
    EXPECT_EQ(cu().StreamQuery_ptsz(nullptr), CUDA_SUCCESS);  // another thread's per-thread stream
  }).join();
  ASSERT_EQ(cu().StreamSynchronize_ptsz(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cu().StreamQuery(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
}

TEST_F(FakeCuda, KernelDurationComesFromItsName) {
  setenv("FAKE_CUDA_KERNEL_US", "300", 1);
  init_and_retain();
  struct Case {
    const char* name;
    uint64_t ns;
  } cases[] = {{"noop_0us", 0}, {"spin_20us", 20'000}, {"_Z9spin_20usPf", 20'000}, {"plain", 300'000},
               {"spin20us", 300'000}};
  for (const auto& c : cases) {
    uint64_t before = cu().busy_ns(0, getpid());
    ASSERT_EQ(launch(function(c.name), nullptr), CUDA_SUCCESS);
    EXPECT_EQ(cu().busy_ns(0, getpid()) - before, c.ns) << c.name;
  }
  CUlibrary library = nullptr;
  CUkernel kernel = nullptr;
  CUfunction f = nullptr;
  ASSERT_EQ(cu().LibraryLoadData(&library, "image", nullptr, nullptr, 0, nullptr, nullptr, 0), CUDA_SUCCESS);
  ASSERT_EQ(cu().LibraryGetKernel(&kernel, library, "lib_7us"), CUDA_SUCCESS);
  ASSERT_EQ(cu().KernelGetFunction(&f, kernel), CUDA_SUCCESS);
  uint64_t before = cu().busy_ns(0, getpid());
  ASSERT_EQ(launch(f, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cu().busy_ns(0, getpid()) - before, 7'000u);
  int threads = 0;
  ASSERT_EQ(cu().FuncGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f), CUDA_SUCCESS);
  EXPECT_EQ(threads, 1024);
  ASSERT_EQ(cu().CtxSynchronize(), CUDA_SUCCESS);
}

TEST_F(FakeCuda, LaunchesAreValidated) {
  init_and_retain();
  CUfunction f = function("noop_0us");
  EXPECT_EQ(launch(nullptr, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cu().LaunchKernel(f, 0, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cu().LaunchKernel(f, 1, 1, 1, 1024, 2, 1, 0, nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  void* params[1] = {nullptr};
  void* extra[1] = {nullptr};
  EXPECT_EQ(cu().LaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, extra), CUDA_ERROR_INVALID_VALUE);
  CUlaunchConfig config{};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = config.blockDimY = config.blockDimZ = 1;
  EXPECT_EQ(cu().LaunchKernelEx(&config, f, nullptr, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cu().LaunchKernelEx(nullptr, f, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cu().CtxSetCurrent(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(launch(f, nullptr), CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(FakeCuda, TimelineIsSharedWithOtherProcesses) {
  init_and_retain();
  Child child = spawn([](const Channel& ch) {
    CUcontext ctx;
    CHILD_CHECK(cu().Init(0) == CUDA_SUCCESS, 3);
    CHILD_CHECK(cu().DevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS && cu().CtxSetCurrent(ctx) == CUDA_SUCCESS, 4);
    CUmodule m;
    CUfunction f;
    CHILD_CHECK(cu().ModuleLoadData(&m, "x") == CUDA_SUCCESS && cu().ModuleGetFunction(&f, m, "long_200000us") == 0, 5);
    CHILD_CHECK(cu().LaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr) == CUDA_SUCCESS, 6);
    ch.put_u64(cu().busy_until_ns(0));
    ch.get_u64();  // stays alive until the parent has looked
    return 0;
  });
  const uint64_t child_end = child.channel.get_u64();
  ASSERT_NE(child_end, ~0ull);
  EXPECT_EQ(cu().busy_ns(0, child.pid), 200'000'000u);
  ASSERT_EQ(launch(function("short_1000us"), nullptr), CUDA_SUCCESS);  // queued behind the child's kernel
  ASSERT_EQ(cu().CtxSynchronize(), CUDA_SUCCESS);
  EXPECT_GE(now_ns(), child_end + 1'000'000);
  EXPECT_EQ(cu().busy_ns(0, getpid()), 1'000'000u);
  EXPECT_EQ(cu().busy_ns(0, 0), 201'000'000u);
  child.channel.put_u64(0);
  EXPECT_EQ(child.wait(), 0);
}

// -- cuGetProcAddress and cuGetExportTable --------------------------------------------------------

void* lookup(const char* name, int version, cuuint64_t flags, CUresult* result = nullptr,
             CUdriverProcAddressQueryResult* status = nullptr) {
  void* p = reinterpret_cast<void*>(1);
  CUdriverProcAddressQueryResult s{};
  CUresult r = cu().GetProcAddress(name, &p, version, flags, &s);
  if (result) *result = r;
  if (status) *status = s;
  return p;
}

TEST_F(FakeCuda, GetProcAddressPicksTheAbiOfTheRequestedVersion) {
  // Works before cuInit, as the runtime needs.
  void* h = cu().handle;
  EXPECT_EQ(lookup("cuMemAlloc", 2000, 0), dlsym(h, "cuMemAlloc"));
  EXPECT_EQ(lookup("cuMemAlloc", 3010, 0), dlsym(h, "cuMemAlloc"));
  EXPECT_EQ(lookup("cuMemAlloc", 3020, 0), dlsym(h, "cuMemAlloc_v2"));
  EXPECT_EQ(lookup("cuMemAlloc", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), dlsym(h, "cuMemAlloc_v2"));
  EXPECT_EQ(lookup("cuGetProcAddress", 11030, 0), dlsym(h, "cuGetProcAddress"));
  EXPECT_EQ(lookup("cuGetProcAddress", 12000, 0), dlsym(h, "cuGetProcAddress_v2"));
  EXPECT_EQ(lookup("cuIpcOpenMemHandle", 11000, 0), dlsym(h, "cuIpcOpenMemHandle_v2"));
  EXPECT_EQ(lookup("cuCtxCreate", 12050, 0), dlsym(h, "cuCtxCreate_v4"));
  EXPECT_EQ(lookup("cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM), dlsym(h, "cuLaunchKernel"));
  EXPECT_EQ(lookup("cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
            dlsym(h, "cuLaunchKernel_ptsz"));
  EXPECT_EQ(lookup("cuMemcpyHtoD", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
            dlsym(h, "cuMemcpyHtoD_v2_ptds"));
  EXPECT_EQ(lookup("cuMemcpyHtoD", 6050, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), dlsym(h, "cuMemcpyHtoD_v2"));
  EXPECT_EQ(lookup("cuMemFreeAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
            dlsym(h, "cuMemFreeAsync_ptsz"));

  CUresult r;
  CUdriverProcAddressQueryResult status;
  EXPECT_EQ(lookup("cuNoSuchFunction", 13000, 0, &r, &status), nullptr);
  EXPECT_EQ(r, CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(lookup("cuMemAlloc_v2", 13000, 0, &r, &status), nullptr);  // base names only
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(lookup("cuMemAllocAsync", 11010, 0, &r, &status), nullptr);
  EXPECT_EQ(r, CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_EQ(lookup("cuMemAlloc", 13000, 3, &r), reinterpret_cast<void*>(1));
  EXPECT_EQ(r, CUDA_ERROR_INVALID_VALUE);

  auto v1 = reinterpret_cast<PFN_cuGetProcAddress_v11030>(dlsym(h, "cuGetProcAddress"));
  void* p = nullptr;
  ASSERT_EQ(v1("cuInit", &p, 11030, 0), CUDA_SUCCESS);
  EXPECT_EQ(p, dlsym(h, "cuInit"));
}

// The dynamic symbols a shared object defines, read from its ELF file.
std::vector<std::string> defined_functions(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> out;
  if (file.size() < sizeof(Elf64_Ehdr)) return out;
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(file.data());
  const auto* sections = reinterpret_cast<const Elf64_Shdr*>(file.data() + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; ++i) {
    if (sections[i].sh_type != SHT_DYNSYM) continue;
    const Elf64_Shdr& strtab = sections[sections[i].sh_link];
    const auto* syms = reinterpret_cast<const Elf64_Sym*>(file.data() + sections[i].sh_offset);
    size_t n = sections[i].sh_size / sizeof(Elf64_Sym);
    for (size_t k = 0; k < n; ++k) {
      if (syms[k].st_shndx == SHN_UNDEF || ELF64_ST_TYPE(syms[k].st_info) != STT_FUNC) continue;
      out.emplace_back(file.data() + strtab.sh_offset + syms[k].st_name);
    }
  }
  return out;
}

TEST_F(FakeCuda, EveryExportedDriverFunctionIsReachableThroughGetProcAddress) {
  // Every version that introduces an ABI variant in cudaTypedefs.h.
  const int versions[] = {2000,  2010,  2020,  3000,  3010,  3020,  4000,  4010,  4020,  5000,  5050,  6000,  6050,
                          7000,  8000,  9000,  9020,  10000, 10010, 10020, 11000, 11010, 11020, 11030, 11040, 11060,
                          11070, 12000, 12010, 12020, 12030, 12040, 12050, 12060, 12080, 12090, 13000};
  std::vector<std::string> exported;
  for (const std::string& name : defined_functions(FAKE_CUDA_LIBRARY)) {
    if (name.rfind("cu", 0) == 0) exported.push_back(name);
  }
  ASSERT_GT(exported.size(), 150u);
  for (const std::string& name : exported) {
    std::string base = name;
    for (bool stripped = true; stripped;) {  // cuMemcpyHtoD_v2_ptds -> cuMemcpyHtoD
      stripped = false;
      for (const char* suffix : {"_ptsz", "_ptds", "_v2", "_v3", "_v4"}) {
        size_t n = std::strlen(suffix);
        if (base.size() > n && base.compare(base.size() - n, n, suffix) == 0) {
          base.resize(base.size() - n);
          stripped = true;
        }
      }
    }
    std::set<void*> reached;
    for (int v : versions) {
      for (cuuint64_t flags : {CU_GET_PROC_ADDRESS_LEGACY_STREAM, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM}) {
        CUresult r;
        void* p = lookup(base.c_str(), v, flags, &r);
        if (r == CUDA_SUCCESS) reached.insert(p);
      }
    }
    EXPECT_TRUE(reached.count(dlsym(cu().handle, name.c_str()))) << name << " (base " << base << ")";
  }
}

TEST_F(FakeCuda, GetExportTableServesOnlyTheTestTable) {
  const int calls = cu().export_table_calls();
  CUuuid test_id;
  std::memcpy(test_id.bytes, "cnlab-fake-table", 16);
  const void* table = nullptr;
  ASSERT_EQ(cu().GetExportTable(&table, &test_id), CUDA_SUCCESS);
  ASSERT_NE(table, nullptr);
  struct TestTable {
    uint64_t magic;
    uint64_t size;
    int (*add_one)(int);
  };
  const auto* t = static_cast<const TestTable*>(table);
  EXPECT_EQ(t->magic, 0x636e6c6162746231ull);
  EXPECT_EQ(t->size, sizeof(TestTable));
  EXPECT_EQ(t->add_one(41), 42);
  CUuuid other{};
  EXPECT_EQ(cu().GetExportTable(&table, &other), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cu().export_table_calls(), calls + 2);
}

// -- threads --------------------------------------------------------------------------------------

TEST_F(FakeCuda, ManyThreadsAllocateFreeAndLaunchAtOnce) {
  CUcontext ctx = init_and_retain();
  CUfunction noop = function("noop_0us");
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      if (cu().CtxSetCurrent(ctx) != CUDA_SUCCESS) ++failures;
      CUstream stream = nullptr;
      if (cu().StreamCreate(&stream, 0) != CUDA_SUCCESS) ++failures;
      for (int i = 0; i < 200; ++i) {
        CUdeviceptr p = 0;
        if (cu().MemAlloc(&p, static_cast<size_t>(1 + (i + t) % 5) * kMiB) != CUDA_SUCCESS) ++failures;
        if (launch(noop, i % 2 ? stream : nullptr) != CUDA_SUCCESS) ++failures;
        CUdeviceptr q = 0;
        if (cu().MemAllocAsync(&q, 4096, stream) != CUDA_SUCCESS) ++failures;
        if (cu().MemsetD8(p, static_cast<unsigned char>(i), 64) != CUDA_SUCCESS) ++failures;
        if (cu().MemFreeAsync(q, stream) != CUDA_SUCCESS) ++failures;
        if (cu().MemFree(p) != CUDA_SUCCESS) ++failures;
      }
      if (cu().StreamSynchronize(stream) != CUDA_SUCCESS) ++failures;
      if (cu().StreamDestroy(stream) != CUDA_SUCCESS) ++failures;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_EQ(cu().CtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(cu().used_bytes(0), 0u);
  EXPECT_EQ(cu().launches(0, getpid()), 8u * 200u);
}

}  // namespace
