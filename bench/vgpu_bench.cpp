// libcnlab-vgpu.so's benchmarks (results: docs/benchmarks/vgpu.md), against the libcuda.so.1 test
// double (tests/fakes):
//  --overhead  what interception adds to a call: the library's code is built into this program, so
//              the same process times the driver's function (found with dlsym on the driver's
//              handle) and the hook that wraps it, alternately, round after round; allocate/free
//              pairs (one thread and eight) and kernel launches without pacing.
//  --split     how close the compute-share limiter holds tenants to their shares on a busy
//              simulated GPU (one kernel at a time): 10/90, 30/70, 50/50, and 100 tenants of 1%
//              each; the real probe processes with the library preloaded, standalone mode.
//  --all       both.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "vgpu/cuda_api.h"
#include "vgpu/hooks.h"
#include "vgpu/library.h"

namespace {

namespace fs = std::filesystem;
using namespace cnlab::vgpu;
using Clock = std::chrono::steady_clock;

constexpr const char* kUuid = "GPU-3f1c0a2b-9d4e-4c1a-8e7f-0123456789ab";

std::string temp_dir() {
  std::string pattern = (fs::temp_directory_path() / "cnlab_vgpu_bench_XXXXXX").string();
  if (!::mkdtemp(pattern.data())) std::abort();
  return pattern;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// ---- Overhead ------------------------------------------------------------------------------------

struct Direct {
  cu::cuInit_t* init;
  cu::cuMemAlloc_v2_t* alloc;
  cu::cuMemFree_v2_t* free;
  cu::LaunchKernelFn* launch;
};

template <typename Body>
double ns_per_op(int ops, Body body) {
  auto start = Clock::now();
  for (int i = 0; i < ops; ++i) body(i);
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() / ops;
}

// Alternates direct and hooked rounds so that drift of the machine's speed hits both alike.
void compare(const char* what, int rounds, int ops, const std::function<double()>& direct,
             const std::function<double()>& hooked) {
  std::vector<double> d, h, diff;
  for (int r = 0; r < rounds; ++r) {
    double a = direct(), b = hooked();
    d.push_back(a);
    h.push_back(b);
    diff.push_back(b - a);
  }
  std::printf("| %s | %.1f | %.1f | %.1f |\n", what, median(d), median(h), median(diff));
  (void)ops;
}

int overhead() {
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    std::fprintf(stderr, "vgpu_bench: the driver test double is not on LD_LIBRARY_PATH: %s\n", dlerror());
    return 1;
  }
  Direct real{reinterpret_cast<cu::cuInit_t*>(dlsym(handle, "cuInit")),
              reinterpret_cast<cu::cuMemAlloc_v2_t*>(dlsym(handle, "cuMemAlloc_v2")),
              reinterpret_cast<cu::cuMemFree_v2_t*>(dlsym(handle, "cuMemFree_v2")),
              reinterpret_cast<cu::LaunchKernelFn*>(dlsym(handle, "cuLaunchKernel"))};
  using CtxRetain = cu::CUresult(cu::CUcontext*, cu::CUdevice);
  using CtxSet = cu::CUresult(cu::CUcontext);
  using ModuleLoad = cu::CUresult(void**, const void*);
  using GetFunction = cu::CUresult(cu::CUfunction*, void*, const char*);
  auto retain = reinterpret_cast<CtxRetain*>(dlsym(handle, "cuDevicePrimaryCtxRetain"));
  auto set = reinterpret_cast<CtxSet*>(dlsym(handle, "cuCtxSetCurrent"));
  auto load = reinterpret_cast<ModuleLoad*>(dlsym(handle, "cuModuleLoadData"));
  auto get = reinterpret_cast<GetFunction*>(dlsym(handle, "cuModuleGetFunction"));
  if (cuInit(0) != cu::CUDA_SUCCESS) {  // the hook: attaches the library
    std::fprintf(stderr, "vgpu_bench: cuInit failed\n");
    return 1;
  }
  cu::CUcontext ctx = nullptr;
  retain(&ctx, 0);
  set(ctx);
  void* module = nullptr;
  load(&module, "image");
  cu::CUfunction noop = nullptr;
  get(&noop, module, "noop_0us");

  constexpr int kRounds = 9, kOps = 200000;
  std::printf("Against a minimal driver stand-in (what the library itself adds):\n\n");
  std::printf("| call | direct ns | through the library ns | added ns (median of %d rounds) |\n|---|---|---|---|\n", kRounds);
  // The library's "real" driver functions swapped for stand-ins that do nothing but hand out
  // addresses, so that the driver's own cost (a memfd and an mmap per allocation in the test double)
  // does not drown the few nanoseconds measured.
  Library& l = lib();
  auto* fake_alloc = l.cuda.cuMemAlloc_v2;
  auto* fake_free = l.cuda.cuMemFree_v2;
  auto* fake_launch = l.cuda.cuLaunchKernel;
  static std::atomic<uint64_t> next_address{uint64_t{1} << 40};
  cu::cuMemAlloc_v2_t* stub_alloc = [](cu::CUdeviceptr* p, size_t bytes) -> cu::CUresult {
    *p = next_address.fetch_add((bytes + 4095) & ~uint64_t{4095}, std::memory_order_relaxed);
    return cu::CUDA_SUCCESS;
  };
  cu::cuMemFree_v2_t* stub_free = [](cu::CUdeviceptr) -> cu::CUresult { return cu::CUDA_SUCCESS; };
  cu::LaunchKernelFn* stub_launch = [](cu::CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                       cu::CUstream, void**, void**) -> cu::CUresult { return cu::CUDA_SUCCESS; };
  l.cuda.cuMemAlloc_v2 = stub_alloc;
  l.cuda.cuMemFree_v2 = stub_free;
  l.cuda.cuLaunchKernel = stub_launch;
  real = {real.init, stub_alloc, stub_free, stub_launch};
  auto pairs = [&](auto* alloc, auto* free) {
    return [=] {
      return ns_per_op(kOps, [&](int) {
        cu::CUdeviceptr p = 0;
        alloc(&p, 4096);
        free(p);
      });
    };
  };
  compare("cuMemAlloc + cuMemFree, 4 KiB, 1 thread", kRounds, kOps, pairs(real.alloc, real.free),
          pairs(&::cuMemAlloc_v2, &::cuMemFree_v2));
  // Several threads: the wall time of all of them for kOps pairs in all, per pair (throughput).
  auto threaded = [&](int n, auto* alloc, auto* free) {
    return [=] {
      std::vector<std::thread> threads;
      auto start = Clock::now();
      for (int t = 0; t < n; ++t) {
        threads.emplace_back([&] {
          set(ctx);
          for (int i = 0; i < kOps / n; ++i) {
            cu::CUdeviceptr p = 0;
            alloc(&p, 4096);
            free(p);
          }
        });
      }
      for (auto& th : threads) th.join();
      return std::chrono::duration<double, std::nano>(Clock::now() - start).count() / kOps;
    };
  };
  compare("cuMemAlloc + cuMemFree, 2 threads (per pair, throughput)", kRounds, kOps, threaded(2, real.alloc, real.free),
          threaded(2, &::cuMemAlloc_v2, &::cuMemFree_v2));
  compare("cuMemAlloc + cuMemFree, 8 threads (per pair, throughput)", kRounds, kOps, threaded(8, real.alloc, real.free),
          threaded(8, &::cuMemAlloc_v2, &::cuMemFree_v2));
  auto launches = [&](cu::LaunchKernelFn* launch) {
    return [=] {
      return ns_per_op(kOps, [&](int) { launch(noop, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr); });
    };
  };
  compare("cuLaunchKernel, no pacing", kRounds, kOps, launches(real.launch), launches(&::cuLaunchKernel));

  // The same through the test double itself, for scale (its allocations cost a memfd and an mmap).
  l.cuda.cuMemAlloc_v2 = fake_alloc;
  l.cuda.cuMemFree_v2 = fake_free;
  l.cuda.cuLaunchKernel = fake_launch;
  std::printf("\nAgainst the libcuda.so.1 test double:\n\n| call | direct ns | through the library ns | added ns (median of %d rounds) |\n|---|---|---|---|\n",
              kRounds);
  compare("cuMemAlloc + cuMemFree, 4 KiB", kRounds, kOps, [&] {
    return ns_per_op(5000, [&](int) {
      cu::CUdeviceptr p = 0;
      fake_alloc(&p, 4096);
      fake_free(p);
    });
  }, [&] {
    return ns_per_op(5000, [&](int) {
      cu::CUdeviceptr p = 0;
      ::cuMemAlloc_v2(&p, 4096);
      ::cuMemFree_v2(p);
    });
  });
  compare("cuLaunchKernel (noop_0us), no pacing", kRounds, kOps, launches(fake_launch), launches(&::cuLaunchKernel));
  return 0;
}

// ---- Split ---------------------------------------------------------------------------------------

struct Tenant {
  int share;
  pid_t pid = -1;
  std::string out;
};

// Runs the probe's `launch` scenario for each tenant at once for `seconds`, each with its share,
// and returns each one's GPU time over the last `window` seconds (from the probe's own marks).
std::vector<double> run_split(const std::vector<int>& shares, double seconds, double window, const std::string& kernel) {
  std::string dir = temp_dir();
  std::ofstream(dir + "/gpus.conf") << "device uuid=" << kUuid << " memory_mib=81920\n";
  std::ofstream(dir + "/nvml.conf") << "gpu name=\"NVIDIA H100 80GB HBM3\" uuid=" << kUuid << " memory_mib=81920\n";
  std::vector<Tenant> tenants;
  for (int s : shares) tenants.push_back({s, -1, ""});
  for (size_t i = 0; i < tenants.size(); ++i) {
    std::string out = dir + "/t" + std::to_string(i) + ".out";
    tenants[i].out = out;
    pid_t pid = ::fork();
    if (pid == 0) {
      int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::setenv("LD_PRELOAD", VGPU_LIBRARY, 1);
      ::setenv("LD_LIBRARY_PATH", (std::string(FAKE_CUDA_DIR) + ":" + FAKE_NVML_DIR).c_str(), 1);
      ::setenv("FAKE_CUDA_CONFIG", (dir + "/gpus.conf").c_str(), 1);
      ::setenv("FAKE_CUDA_STATE_DIR", (dir + "/state").c_str(), 1);
      ::setenv("FAKE_NVML_CONFIG", (dir + "/nvml.conf").c_str(), 1);
      ::setenv("CNLAB_VGPU_DIR", (dir + "/vgpu").c_str(), 1);
      ::setenv("CNLAB_VGPU_TENANT", ("t" + std::to_string(i)).c_str(), 1);
      ::setenv("CNLAB_VGPU_COMPUTE_SHARE", std::to_string(tenants[i].share).c_str(), 1);
      std::string secs = std::to_string(seconds);
      // No kernel named: the tenants take turns at 100, 200 and 400 us (unpaced, the longer ones
      // would take more).
      static const char* const kMixed[] = {"spin_100us", "spin_200us", "spin_400us"};
      std::string name = kernel.empty() ? kMixed[i % 3] : kernel;
      ::execl(PROBE_BINARY, PROBE_BINARY, "launch", name.c_str(), secs.c_str(), "8", nullptr);
      ::_exit(127);
    }
    tenants[i].pid = pid;
  }
  for (auto& t : tenants) ::waitpid(t.pid, nullptr, 0);
  std::vector<double> busy;
  for (auto& t : tenants) {
    std::ifstream in(t.out);
    std::vector<std::pair<double, double>> marks;  // (ms, busy ns)
    for (std::string line; std::getline(in, line);) {
      long long b = 0, ms = 0;
      if (std::sscanf(line.c_str(), "busy %lld at_ms %lld", &b, &ms) == 2) marks.push_back({double(ms), double(b)});
    }
    double end_ms = seconds * 1000 - 250, start_ms = end_ms - window * 1000;
    auto near = [&](double ms) {
      const std::pair<double, double>* best = nullptr;
      for (const auto& m : marks) {
        if (!best || std::fabs(m.first - ms) < std::fabs(best->first - ms)) best = &m;
      }
      return best ? *best : std::pair<double, double>{ms, 0};
    };
    busy.push_back(near(end_ms).second - near(start_ms).second);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  return busy;
}

void report_split(const char* what, const std::vector<int>& shares, double seconds, double window, const std::string& kernel) {
  auto busy = run_split(shares, seconds, window, kernel);
  double total = 0;
  for (double b : busy) total += b;
  double worst = 0, sum_error = 0;
  std::string got;
  for (size_t i = 0; i < shares.size(); ++i) {
    double pct = total > 0 ? 100 * busy[i] / total : 0;
    double error = std::fabs(pct - shares[i]);
    worst = std::max(worst, error);
    sum_error += error;
    if (shares.size() <= 4) got += (got.empty() ? "" : " / ") + std::to_string(static_cast<int>(std::lround(pct * 10)) / 10.0).substr(0, 4);
  }
  if (got.empty()) got = "(100 tenants)";
  double utilisation = total / (window * 1e9);
  std::printf("| %s | %s | %.2f | %.2f | %.0f%% |\n", what, got.c_str(), worst, sum_error / shares.size(), 100 * utilisation);
}

int split() {
  std::printf("| shares | measured | worst error (points) | mean error (points) | GPU busy |\n|---|---|---|---|---|\n");
  report_split("10 / 90, 200 us kernels", {10, 90}, 9, 5, "spin_200us");
  report_split("30 / 70, 200 us kernels", {30, 70}, 9, 5, "spin_200us");
  report_split("50 / 50, 200 us kernels", {50, 50}, 9, 5, "spin_200us");
  report_split("30 / 70, 2 ms kernels", {30, 70}, 9, 5, "spin_2000us");
  report_split("30 / 70, 20 us kernels", {30, 70}, 9, 5, "spin_20us");
  report_split("100 x 1%, kernels of 100, 200 and 400 us", std::vector<int>(100, 1), 14, 6, "");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "--all";
  // The library reads its configuration when it loads: give it one, then run again.
  if (!std::getenv("CNLAB_VGPU_BENCH_CHILD")) {
    std::string dir = temp_dir();
    std::ofstream(dir + "/gpus.conf") << "device uuid=" << kUuid << " memory_mib=81920\n";
    ::setenv("CNLAB_VGPU_BENCH_CHILD", "1", 1);
    ::setenv("LD_LIBRARY_PATH", FAKE_CUDA_DIR, 1);
    ::setenv("FAKE_CUDA_CONFIG", (dir + "/gpus.conf").c_str(), 1);
    ::setenv("FAKE_CUDA_STATE_DIR", (dir + "/state").c_str(), 1);
    ::setenv("CNLAB_VGPU_DIR", (dir + "/vgpu").c_str(), 1);
    ::setenv("CNLAB_VGPU_TENANT", "bench", 1);
    ::setenv("CNLAB_VGPU_MEMORY_LIMIT", "64Gi", 1);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::execv("/proc/self/exe", argv);
      ::_exit(127);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    std::error_code ec;
    fs::remove_all(dir, ec);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }
  std::printf("vgpu_bench on %u CPUs; driver: the libcuda.so.1 test double\n\n", std::thread::hardware_concurrency());
  int rc = 0;
  if (mode == "--overhead" || mode == "--all") rc |= overhead();
  if (mode == "--split" || mode == "--all") {
    std::printf("\n");
    rc |= split();
  }
  return rc;
}
