// TEST DOUBLE of NVIDIA's libnvidia-ml.so.1 for machines without a GPU.
//
// Built as libnvidia-ml.so.1 in its own directory (build/fakes/nvml), it exports the NVML functions
// the agent calls (declared in src/agent/gpu/nvml_api.h, so the compiler checks that both sides
// agree) and plays a driver with the GPUs a configuration file describes. It keeps MIG state in the
// process and checks placements the way the driver does (an overlap is
// NVML_ERROR_INSUFFICIENT_RESOURCES), independently of the agent's own model::MigLayout.
//
// Configuration: FAKE_NVML_CONFIG names a file, read at the first nvmlInit_v2 (state is dropped at
// the last nvmlShutdown, so every init starts fresh). Unset: a machine with no GPUs. One directive
// per line, fields key=value, values in "double quotes" may hold spaces, '#' starts a comment:
//
//   gpu name="NVIDIA H100 80GB HBM3" uuid=GPU-0 memory_mib=81559 used_mib=1024 util=37
//       mig=on|off|unsupported processes=0 ecc=0|<count>|unsupported events=1|0
//   instance gpu=0 profile=2 start=0 cis=1   # a GPU instance that exists at init: `profile` is an
//                                            # NVML_GPU_INSTANCE_PROFILE_* value, `cis` its
//                                            # compute instances (default 1, or 0)
//   fail call=nvmlDeviceGetMemoryInfo gpu=1 ret=15   # that call (for that GPU, or any without
//                                                    # gpu=) returns that nvmlReturn_t
//   xid gpu=0 value=79                       # an Xid event pending from the start
//
// GPU instance profiles (A100/H100 geometry; ids as `nvidia-smi mig -lgip` prints them, which are
// not the enum values): 1_SLICE id 19 (1 slot, starts 0..6), 1_SLICE_REV1 id 20 (1g+me), 1_SLICE_REV2
// id 15 (2 slots, starts 0,2,4,6), 2_SLICE id 14 (2 slots, 0,2,4), 3_SLICE id 9 (4 slots, 0,4),
// 4_SLICE id 5 (4 slots, 0), 7_SLICE id 0 (8 slots, 0). Compute instance profile ids are the enum.
//
// Tests drive it further through extra C functions (fake_nvml_*, below), found with dlsym.
#include <dlfcn.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "agent/gpu/nvml_api.h"

namespace cnlab::agent::nvml {
namespace {

struct GiProfileShape {
  unsigned profile;  // NVML_GPU_INSTANCE_PROFILE_*
  unsigned id;
  unsigned slices;
  unsigned size;  // memory slots
  unsigned starts;  // bit i: may start at slot i
};

constexpr GiProfileShape kGiProfiles[] = {
    {NVML_GPU_INSTANCE_PROFILE_1_SLICE, 19, 1, 1, 0b0111'1111},
    {NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, 20, 1, 1, 0b0111'1111},
    {NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, 15, 1, 2, 0b0101'0101},
    {NVML_GPU_INSTANCE_PROFILE_2_SLICE, 14, 2, 2, 0b0001'0101},
    {NVML_GPU_INSTANCE_PROFILE_3_SLICE, 9, 3, 4, 0b0001'0001},
    {NVML_GPU_INSTANCE_PROFILE_4_SLICE, 5, 4, 4, 0b0000'0001},
    {NVML_GPU_INSTANCE_PROFILE_7_SLICE, 0, 7, 8, 0b0000'0001},
};

const GiProfileShape* gi_profile_by_enum(unsigned profile) {
  for (const auto& p : kGiProfiles) {
    if (p.profile == profile) return &p;
  }
  return nullptr;
}
const GiProfileShape* gi_profile_by_id(unsigned id) {
  for (const auto& p : kGiProfiles) {
    if (p.id == id) return &p;
  }
  return nullptr;
}

unsigned ci_slices(unsigned ci_profile) {
  switch (ci_profile) {
    case NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE: return 1;
    case NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE: return 2;
    case NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE: return 3;
    case NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE: return 4;
    case NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE: return 7;
    default: return 0;  // 8, 6 and 1+me are not offered on this geometry
  }
}

enum class Kind { kGpu, kMigDevice };
struct Handle {
  Kind kind;
};

struct Gpu;
struct GpuInstance;

struct ComputeInstance {
  GpuInstance* gi = nullptr;
  unsigned id = 0;
  unsigned profile = 0;
  unsigned slices = 0;
  bool alive = true;
};

struct MigDevice : Handle {
  GpuInstance* gi = nullptr;
};

struct GpuInstance {
  Gpu* gpu = nullptr;
  unsigned id = 0;
  const GiProfileShape* shape = nullptr;
  unsigned start = 0;
  bool alive = true;
  std::vector<std::unique_ptr<ComputeInstance>> cis;
  MigDevice mig{{Kind::kMigDevice}, nullptr};

  unsigned used_ci_slices() const {
    unsigned n = 0;
    for (const auto& ci : cis) n += ci->alive ? ci->slices : 0;
    return n;
  }
  int live_cis() const {
    int n = 0;
    for (const auto& ci : cis) n += ci->alive ? 1 : 0;
    return n;
  }
};

// One process's utilization samples on one GPU, each its share of the GPU since its previous
// sample, kept for kKeptUs.
struct ProcessSamples {
  unsigned long long last_us = 0;  // when its previous sample was taken (realtime us); 0: never
  unsigned long long busy_ns = 0;  // its busy ns then
  std::deque<std::pair<unsigned long long, unsigned>> kept;  // (time, sm percent), oldest first
};

struct Gpu : Handle {
  unsigned index = 0;
  std::string name = "NVIDIA H100 80GB HBM3";
  std::string uuid;
  unsigned long long memory_mib = 81559;
  unsigned long long used_mib = 0;
  int util = 0;           // -1: NOT_SUPPORTED
  int mig = -1;           // -1: NOT_SUPPORTED, 0 off, 1 on
  int processes = 0;
  long long ecc = 0;      // -1: NOT_SUPPORTED
  // Per pid: its process utilization samples, as the driver keeps them, taken up to this tick.
  std::map<int, ProcessSamples> samples;
  unsigned long long sampled_to_us = 0;
  bool events = true;
  unsigned next_gi_id = 1;
  unsigned next_ci_id = 1;
  // Destroyed instances stay (alive = false) so that a stale handle is refused, never dangling.
  std::vector<std::unique_ptr<GpuInstance>> gis;
};

struct Failure {
  std::string call;
  int gpu = -1;  // -1: every GPU (and calls without one)
  nvmlReturn_t ret = NVML_SUCCESS;
};

struct Event {
  Gpu* gpu;
  unsigned long long type;
  unsigned long long data;
};

struct EventSet {
  std::map<Gpu*, unsigned long long> registered;
};

struct State {
  int init_count = 0;
  std::vector<std::unique_ptr<Gpu>> gpus;
  std::vector<Failure> failures;
  std::deque<Event> pending;
  std::set<EventSet*> sets;
};

std::mutex g_mu;
State g_state;
std::map<std::string, int> g_calls;  // survives shutdown, so a test can count across a backend's life

// -- configuration ------------------------------------------------------------------------------

using Fields = std::map<std::string, std::string>;

bool parse_fields(const std::string& line, std::string& directive, Fields& fields) {
  size_t i = 0;
  auto skip_space = [&] {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  };
  skip_space();
  while (i < line.size() && line[i] != ' ' && line[i] != '\t') directive += line[i++];
  if (!directive.empty() && directive[0] == '#') return true;
  while (true) {
    skip_space();
    if (i >= line.size() || line[i] == '#') return true;
    std::string key, value;
    while (i < line.size() && line[i] != '=' && line[i] != ' ') key += line[i++];
    if (i >= line.size() || line[i] != '=') return false;
    ++i;
    if (i < line.size() && line[i] == '"') {
      ++i;
      while (i < line.size() && line[i] != '"') value += line[i++];
      if (i >= line.size()) return false;
      ++i;
    } else {
      while (i < line.size() && line[i] != ' ' && line[i] != '\t') value += line[i++];
    }
    fields[key] = value;
  }
}

std::string text(const Fields& f, const char* key) {
  auto it = f.find(key);
  return it == f.end() ? std::string() : it->second;
}

long long number(const Fields& f, const char* key, long long fallback) {
  auto it = f.find(key);
  if (it == f.end()) return fallback;
  return std::stoll(it->second);
}

nvmlReturn_t create_gi(Gpu& gpu, const GiProfileShape& shape, unsigned start, unsigned size, GpuInstance** out);

// Returns an error message, or "" when the file was read.
std::string load_config(const char* path) {
  std::ifstream in(path);
  if (!in) return std::string("cannot read ") + path;
  std::string line;
  int line_no = 0;
  try {
    while (std::getline(in, line)) {
      ++line_no;
      std::string directive;
      Fields f;
      if (!parse_fields(line, directive, f)) return "line " + std::to_string(line_no) + ": malformed field";
      if (directive.empty() || directive[0] == '#') continue;
      if (directive == "gpu") {
        auto gpu = std::make_unique<Gpu>();
        gpu->kind = Kind::kGpu;
        gpu->index = static_cast<unsigned>(g_state.gpus.size());
        if (f.count("name")) gpu->name = text(f, "name");
        gpu->uuid = f.count("uuid") ? text(f, "uuid") : "GPU-fake-" + std::to_string(gpu->index);
        gpu->memory_mib = static_cast<unsigned long long>(number(f, "memory_mib", 81559));
        gpu->used_mib = static_cast<unsigned long long>(number(f, "used_mib", 0));
        gpu->util = text(f, "util") == "unsupported" ? -1 : static_cast<int>(number(f, "util", 0));
        std::string mig = f.count("mig") ? text(f, "mig") : "unsupported";
        gpu->mig = mig == "on" ? 1 : mig == "off" ? 0 : -1;
        gpu->processes = static_cast<int>(number(f, "processes", 0));
        gpu->ecc = text(f, "ecc") == "unsupported" ? -1 : number(f, "ecc", 0);
        gpu->events = number(f, "events", 1) != 0;
        g_state.gpus.push_back(std::move(gpu));
      } else if (directive == "instance") {
        auto index = static_cast<size_t>(number(f, "gpu", 0));
        const GiProfileShape* shape = gi_profile_by_enum(static_cast<unsigned>(number(f, "profile", -1)));
        if (index >= g_state.gpus.size() || !shape) return "line " + std::to_string(line_no) + ": bad gpu or profile";
        Gpu& gpu = *g_state.gpus[index];
        GpuInstance* gi = nullptr;
        int was = gpu.mig;
        gpu.mig = 1;
        nvmlReturn_t r = create_gi(gpu, *shape, static_cast<unsigned>(number(f, "start", 0)), shape->size, &gi);
        gpu.mig = was;
        if (r != NVML_SUCCESS) return "line " + std::to_string(line_no) + ": placement refused (" + std::to_string(r) + ")";
        for (long long c = number(f, "cis", 1); c > 0; --c) {
          auto ci = std::make_unique<ComputeInstance>();
          ci->gi = gi;
          ci->id = gpu.next_ci_id++;
          ci->slices = shape->slices;
          ci->profile = shape->slices == 7 ? NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE : shape->slices - 1;
          gi->cis.push_back(std::move(ci));
        }
      } else if (directive == "fail") {
        g_state.failures.push_back({text(f, "call"), static_cast<int>(number(f, "gpu", -1)),
                                    static_cast<nvmlReturn_t>(number(f, "ret", NVML_ERROR_UNKNOWN))});
      } else if (directive == "xid") {
        auto index = static_cast<size_t>(number(f, "gpu", 0));
        if (index >= g_state.gpus.size()) return "line " + std::to_string(line_no) + ": no such gpu";
        g_state.pending.push_back({g_state.gpus[index].get(), nvmlEventTypeXidCriticalError,
                                   static_cast<unsigned long long>(number(f, "value", 999))});
      } else {
        return "line " + std::to_string(line_no) + ": unknown directive \"" + directive + "\"";
      }
    }
  } catch (const std::exception& e) {
    return "line " + std::to_string(line_no) + ": " + e.what();
  }
  return "";
}

// -- helpers --------------------------------------------------------------------------------------

void count_call(const char* name) { ++g_calls[name]; }

std::optional<nvmlReturn_t> injected(const char* call, const Gpu* gpu) {
  for (const auto& f : g_state.failures) {
    if (f.call == call && (f.gpu < 0 || (gpu && f.gpu == static_cast<int>(gpu->index)))) return f.ret;
  }
  return std::nullopt;
}

Gpu* as_gpu(nvmlDevice_t device) {
  for (auto& g : g_state.gpus) {
    if (reinterpret_cast<nvmlDevice_t>(static_cast<Handle*>(g.get())) == device) return g.get();
  }
  return nullptr;
}

MigDevice* as_mig_device(nvmlDevice_t device) {
  for (auto& g : g_state.gpus) {
    for (auto& gi : g->gis) {
      if (gi->alive && reinterpret_cast<nvmlDevice_t>(static_cast<Handle*>(&gi->mig)) == device) return &gi->mig;
    }
  }
  return nullptr;
}

GpuInstance* as_gi(nvmlGpuInstance_t handle) {
  for (auto& g : g_state.gpus) {
    for (auto& gi : g->gis) {
      if (reinterpret_cast<nvmlGpuInstance_t>(gi.get()) == handle) return gi->alive ? gi.get() : nullptr;
    }
  }
  return nullptr;
}

ComputeInstance* as_ci(nvmlComputeInstance_t handle) {
  for (auto& g : g_state.gpus) {
    for (auto& gi : g->gis) {
      for (auto& ci : gi->cis) {
        if (reinterpret_cast<nvmlComputeInstance_t>(ci.get()) == handle) return ci->alive ? ci.get() : nullptr;
      }
    }
  }
  return nullptr;
}

nvmlReturn_t create_gi(Gpu& gpu, const GiProfileShape& shape, unsigned start, unsigned size, GpuInstance** out) {
  if (gpu.mig != 1) return NVML_ERROR_NOT_SUPPORTED;
  if (size != shape.size || start >= 8 || !(shape.starts >> start & 1)) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned used_slots = 0, used_slices = 0;
  for (const auto& gi : gpu.gis) {
    if (!gi->alive) continue;
    used_slots |= ((1u << gi->shape->size) - 1) << gi->start;
    used_slices += gi->shape->slices;
  }
  unsigned wanted = ((1u << shape.size) - 1) << start;
  if ((used_slots & wanted) != 0 || used_slices + shape.slices > 7) return NVML_ERROR_INSUFFICIENT_RESOURCES;
  auto gi = std::make_unique<GpuInstance>();
  gi->gpu = &gpu;
  gi->id = gpu.next_gi_id++;
  gi->shape = &shape;
  gi->start = start;
  gi->mig.gi = gi.get();
  *out = gi.get();
  gpu.gis.push_back(std::move(gi));
  return NVML_SUCCESS;
}

void reset_state() {
  for (EventSet* s : g_state.sets) delete s;
  g_state = State{};
}

#define FAKE_BEGIN(name)                    \
  std::lock_guard<std::mutex> lock(g_mu);   \
  count_call(name);                         \
  if (g_state.init_count == 0) return NVML_ERROR_UNINITIALIZED

#define FAKE_DEVICE(name, device)                                 \
  FAKE_BEGIN(name);                                               \
  Gpu* gpu = as_gpu(device);                                      \
  if (!gpu) return NVML_ERROR_INVALID_ARGUMENT;                   \
  if (auto r = injected(name, gpu)) return *r

// nvmlMemory_v2_t, declared here (the agent does not call it; the vGPU library hooks it).
struct nvmlMemory_v2_t {
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};

// Process utilization comes from the libcuda.so.1 test double's shared state (a kernel's simulated
// time counts for the process that launched it): through its fake_cuda_process_busy hook, found in
// the process (a CUDA program) or in FAKE_NVML_CUDA_LIBRARY (the agent, which loads no CUDA).
// Sampled as the real driver was seen to sample (an H200, driver 580, two busy processes): a tick
// every kSampleUs samples one process, so each process's samples are sparse and stamped apart from
// the others'; samples are kept for a while; a call returns, per process, the mean of its samples
// newer than lastSeenTimeStamp (one entry per process, stamped with its newest), and
// NVML_ERROR_NOT_FOUND when no process has one. A caller that asks only for samples newer than the
// newest stamp it saw therefore sees one process at a time, or none, as it did on the real GPU.
constexpr unsigned long long kSampleUs = 100'000;
constexpr unsigned long long kKeptUs = 5'000'000;
using ProcessBusyHook = int (*)(const char* uuid, int* pids, unsigned long long* busy_ns, int max);

ProcessBusyHook process_busy_hook() {
  static ProcessBusyHook hook = [] {
    void* p = dlsym(RTLD_DEFAULT, "fake_cuda_process_busy");
    if (!p) {
      const char* library = std::getenv("FAKE_NVML_CUDA_LIBRARY");
      if (library && *library) {
        if (void* lib = dlopen(library, RTLD_NOW | RTLD_LOCAL)) p = dlsym(lib, "fake_cuda_process_busy");
      }
    }
    return reinterpret_cast<ProcessBusyHook>(p);
  }();
  return hook;
}

// Sample timestamps are the CPU's wall clock in microseconds, as the driver's are.
unsigned long long realtime_us() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<unsigned long long>(ts.tv_sec) * 1000000ull + static_cast<unsigned long long>(ts.tv_nsec) / 1000;
}

}  // namespace

extern "C" {

nvmlReturn_t nvmlInit_v2(void) {
  std::lock_guard<std::mutex> lock(g_mu);
  count_call("nvmlInit_v2");
  if (g_state.init_count > 0) {
    ++g_state.init_count;
    return NVML_SUCCESS;
  }
  reset_state();
  if (const char* path = std::getenv("FAKE_NVML_CONFIG"); path && *path) {
    std::string error = load_config(path);
    if (!error.empty()) {
      std::fprintf(stderr, "fake_nvml: %s: %s\n", path, error.c_str());
      reset_state();
      return NVML_ERROR_UNKNOWN;
    }
  }
  if (auto r = injected("nvmlInit_v2", nullptr)) {
    reset_state();
    return *r;
  }
  g_state.init_count = 1;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void) {
  FAKE_BEGIN("nvmlShutdown");
  if (--g_state.init_count == 0) reset_state();
  return NVML_SUCCESS;
}

const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources";
    default: return "Unknown Error";
  }
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount) {
  FAKE_BEGIN("nvmlDeviceGetCount_v2");
  if (auto r = injected("nvmlDeviceGetCount_v2", nullptr)) return *r;
  *deviceCount = static_cast<unsigned>(g_state.gpus.size());
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  FAKE_BEGIN("nvmlDeviceGetHandleByIndex_v2");
  if (index >= g_state.gpus.size()) return NVML_ERROR_INVALID_ARGUMENT;
  if (auto r = injected("nvmlDeviceGetHandleByIndex_v2", g_state.gpus[index].get())) return *r;
  *device = reinterpret_cast<nvmlDevice_t>(static_cast<Handle*>(g_state.gpus[index].get()));
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  FAKE_BEGIN("nvmlDeviceGetUUID");
  std::string text;
  if (Gpu* gpu = as_gpu(device)) {
    if (auto r = injected("nvmlDeviceGetUUID", gpu)) return *r;
    text = gpu->uuid;
  } else if (MigDevice* mig = as_mig_device(device)) {
    text = "MIG-" + mig->gi->gpu->uuid.substr(4) + "-" + std::to_string(mig->gi->id);
  } else {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (text.size() + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(uuid, text.c_str(), text.size() + 1);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  FAKE_DEVICE("nvmlDeviceGetName", device);
  if (gpu->name.size() + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(name, gpu->name.c_str(), gpu->name.size() + 1);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  FAKE_DEVICE("nvmlDeviceGetMemoryInfo", device);
  memory->total = gpu->memory_mib << 20;
  memory->used = gpu->used_mib << 20;
  memory->free = memory->total - memory->used;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  FAKE_DEVICE("nvmlDeviceGetMemoryInfo_v2", device);
  if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
  memory->total = gpu->memory_mib << 20;
  memory->reserved = 0;
  memory->used = gpu->used_mib << 20;
  memory->free = memory->total - memory->used;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  FAKE_BEGIN("nvmlDeviceGetHandleByUUID");
  if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
  for (auto& gpu : g_state.gpus) {
    if (gpu->uuid == uuid) {
      *device = reinterpret_cast<nvmlDevice_t>(static_cast<Handle*>(gpu.get()));
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t* utilization,
                                             unsigned int* processSamplesCount, unsigned long long lastSeenTimeStamp) {
  FAKE_DEVICE("nvmlDeviceGetProcessUtilization", device);
  if (!processSamplesCount) return NVML_ERROR_INVALID_ARGUMENT;
  ProcessBusyHook hook = process_busy_hook();
  if (!hook) return NVML_ERROR_NOT_SUPPORTED;
  int pids[256];
  unsigned long long busy[256];
  const int n = std::max(0, hook(gpu->uuid.c_str(), pids, busy, 256));
  for (int i = 1; i < n; ++i) {  // by pid: the sampler's round-robin order
    for (int j = i; j > 0 && pids[j - 1] > pids[j]; --j) {
      std::swap(pids[j - 1], pids[j]);
      std::swap(busy[j - 1], busy[j]);
    }
  }
  const unsigned long long now = realtime_us();
  const unsigned long long tick = now / kSampleUs * kSampleUs;
  if (gpu->sampled_to_us == 0) gpu->sampled_to_us = tick;  // first call: sampling starts here
  // Each tick since the last call samples one process, in turn. Its sample is its share of the GPU
  // since it was last sampled, from its busy time now (all the double can know), so the ticks of
  // one call that sample one process all read the same share.
  std::vector<bool> sampled(static_cast<size_t>(n), false);
  for (unsigned long long t = gpu->sampled_to_us + kSampleUs; t <= tick && n > 0; t += kSampleUs) {
    const int i = static_cast<int>((t / kSampleUs) % static_cast<unsigned long long>(n));
    ProcessSamples& p = gpu->samples[pids[i]];
    sampled[static_cast<size_t>(i)] = true;
    if (p.last_us == 0) continue;  // new to the sampler: measured from here
    const unsigned long long span_us = std::max(1ull, now - p.last_us);
    const unsigned long long done = busy[i] >= p.busy_ns ? busy[i] - p.busy_ns : 0;
    p.kept.push_back({t, static_cast<unsigned>(std::min<unsigned long long>(100, done / 10 / span_us))});
  }
  for (int i = 0; i < n; ++i) {
    if (!sampled[static_cast<size_t>(i)]) continue;
    gpu->samples[pids[i]].last_us = now;
    gpu->samples[pids[i]].busy_ns = busy[i];
  }
  gpu->sampled_to_us = tick;
  std::vector<nvmlProcessUtilizationSample_t> out;
  for (auto& [pid, p] : gpu->samples) {
    while (!p.kept.empty() && p.kept.front().first + kKeptUs < now) p.kept.pop_front();
    // One entry per process: the mean of its samples newer than lastSeenTimeStamp, stamped with the
    // newest of them; a process without one is left out.
    unsigned long long sum = 0, count = 0, stamp = 0;
    for (const auto& [t, percent] : p.kept) {
      if (t <= lastSeenTimeStamp) continue;
      sum += percent;
      ++count;
      stamp = t;
    }
    if (count > 0) out.push_back({static_cast<unsigned>(pid), stamp, static_cast<unsigned>(sum / count), 0, 0, 0});
  }
  if (out.empty()) return NVML_ERROR_NOT_FOUND;  // no sample newer than lastSeenTimeStamp
  if (!utilization || *processSamplesCount < out.size()) {
    *processSamplesCount = static_cast<unsigned>(out.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  std::copy(out.begin(), out.end(), utilization);
  *processSamplesCount = static_cast<unsigned>(out.size());
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  FAKE_DEVICE("nvmlDeviceGetUtilizationRates", device);
  if (gpu->util < 0) return NVML_ERROR_NOT_SUPPORTED;
  utilization->gpu = static_cast<unsigned>(gpu->util);
  utilization->memory = 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_t* infos) {
  FAKE_DEVICE("nvmlDeviceGetComputeRunningProcesses_v3", device);
  auto n = static_cast<unsigned>(gpu->processes);
  if (*infoCount < n) {
    *infoCount = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned i = 0; i < n; ++i) infos[i] = {1000 + i, 256ull << 20, 0xFFFFFFFF, 0xFFFFFFFF};
  *infoCount = n;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, unsigned int errorType, unsigned int counterType,
                                         unsigned long long* eccCounts) {
  FAKE_DEVICE("nvmlDeviceGetTotalEccErrors", device);
  if (gpu->ecc < 0) return NVML_ERROR_NOT_SUPPORTED;
  if (errorType != NVML_MEMORY_ERROR_TYPE_UNCORRECTED || counterType != NVML_VOLATILE_ECC) {
    *eccCounts = 0;
    return NVML_SUCCESS;
  }
  *eccCounts = static_cast<unsigned long long>(gpu->ecc);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* currentMode, unsigned int* pendingMode) {
  FAKE_DEVICE("nvmlDeviceGetMigMode", device);
  if (gpu->mig < 0) return NVML_ERROR_NOT_SUPPORTED;
  *currentMode = *pendingMode = static_cast<unsigned>(gpu->mig);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count) {
  FAKE_DEVICE("nvmlDeviceGetMaxMigDeviceCount", device);
  *count = gpu->mig == 1 ? 7 : 0;
  return NVML_SUCCESS;
}

// The index-th GPU instance that holds a compute instance (a MIG device is a compute instance a
// process can use; this fake makes one per GPU instance).
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t* migDevice) {
  FAKE_DEVICE("nvmlDeviceGetMigDeviceHandleByIndex", device);
  unsigned seen = 0;
  for (auto& gi : gpu->gis) {
    if (!gi->alive || gi->live_cis() == 0) continue;
    if (seen++ == index) {
      *migDevice = reinterpret_cast<nvmlDevice_t>(static_cast<Handle*>(&gi->mig));
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id) {
  FAKE_BEGIN("nvmlDeviceGetGpuInstanceId");
  MigDevice* mig = as_mig_device(device);
  if (!mig) return as_gpu(device) ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
  *id = mig->gi->id;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t* info) {
  FAKE_DEVICE("nvmlDeviceGetGpuInstanceProfileInfo", device);
  if (gpu->mig < 0) return NVML_ERROR_NOT_SUPPORTED;
  if (profile >= NVML_GPU_INSTANCE_PROFILE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
  const GiProfileShape* shape = gi_profile_by_enum(profile);
  if (!shape) return NVML_ERROR_NOT_SUPPORTED;
  *info = {};
  info->id = shape->id;
  info->sliceCount = shape->slices;
  info->instanceCount = std::min(7u / shape->slices, 8u / shape->size);
  info->memorySizeMB = gpu->memory_mib * shape->size / 8;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profileId,
                                                      const nvmlGpuInstancePlacement_t* placement,
                                                      nvmlGpuInstance_t* gpuInstance) {
  FAKE_DEVICE("nvmlDeviceCreateGpuInstanceWithPlacement", device);
  const GiProfileShape* shape = gi_profile_by_id(profileId);
  if (!shape || !placement) return NVML_ERROR_INVALID_ARGUMENT;
  GpuInstance* gi = nullptr;
  nvmlReturn_t r = create_gi(*gpu, *shape, placement->start, placement->size, &gi);
  if (r == NVML_SUCCESS) *gpuInstance = reinterpret_cast<nvmlGpuInstance_t>(gi);
  return r;
}

nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstance_t* gpuInstances,
                                       unsigned int* count) {
  FAKE_DEVICE("nvmlDeviceGetGpuInstances", device);
  if (gpu->mig != 1) return NVML_ERROR_NOT_SUPPORTED;
  if (!gi_profile_by_id(profileId)) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned n = 0;
  for (auto& gi : gpu->gis) {
    if (gi->alive && gi->shape->id == profileId) gpuInstances[n++] = reinterpret_cast<nvmlGpuInstance_t>(gi.get());
  }
  *count = n;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t* info) {
  FAKE_BEGIN("nvmlGpuInstanceGetInfo");
  GpuInstance* gi = as_gi(gpuInstance);
  if (!gi) return NVML_ERROR_INVALID_ARGUMENT;
  if (auto r = injected("nvmlGpuInstanceGetInfo", gi->gpu)) return *r;
  info->device = reinterpret_cast<nvmlDevice_t>(static_cast<Handle*>(gi->gpu));
  info->id = gi->id;
  info->profileId = gi->shape->id;
  info->placement = {gi->start, gi->shape->size};
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance) {
  FAKE_BEGIN("nvmlGpuInstanceDestroy");
  GpuInstance* gi = as_gi(gpuInstance);
  if (!gi) return NVML_ERROR_INVALID_ARGUMENT;
  if (auto r = injected("nvmlGpuInstanceDestroy", gi->gpu)) return *r;
  if (gi->live_cis() > 0) return NVML_ERROR_IN_USE;
  gi->alive = false;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                          unsigned int engProfile,
                                                          nvmlComputeInstanceProfileInfo_t* info) {
  FAKE_BEGIN("nvmlGpuInstanceGetComputeInstanceProfileInfo");
  GpuInstance* gi = as_gi(gpuInstance);
  if (!gi || profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
  if (auto r = injected("nvmlGpuInstanceGetComputeInstanceProfileInfo", gi->gpu)) return *r;
  unsigned slices = ci_slices(profile);
  if (engProfile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED || slices == 0 || slices > gi->shape->slices) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  *info = {};
  info->id = profile;
  info->sliceCount = slices;
  info->instanceCount = gi->shape->slices / slices;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                  nvmlComputeInstance_t* computeInstance) {
  FAKE_BEGIN("nvmlGpuInstanceCreateComputeInstance");
  GpuInstance* gi = as_gi(gpuInstance);
  if (!gi) return NVML_ERROR_INVALID_ARGUMENT;
  if (auto r = injected("nvmlGpuInstanceCreateComputeInstance", gi->gpu)) return *r;
  unsigned slices = ci_slices(profileId);
  if (slices == 0) return NVML_ERROR_INVALID_ARGUMENT;
  if (gi->used_ci_slices() + slices > gi->shape->slices) return NVML_ERROR_INSUFFICIENT_RESOURCES;
  auto ci = std::make_unique<ComputeInstance>();
  ci->gi = gi;
  ci->id = gi->gpu->next_ci_id++;
  ci->profile = profileId;
  ci->slices = slices;
  *computeInstance = reinterpret_cast<nvmlComputeInstance_t>(ci.get());
  gi->cis.push_back(std::move(ci));
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                nvmlComputeInstance_t* computeInstances, unsigned int* count) {
  FAKE_BEGIN("nvmlGpuInstanceGetComputeInstances");
  GpuInstance* gi = as_gi(gpuInstance);
  if (!gi) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned n = 0;
  for (auto& ci : gi->cis) {
    if (ci->alive && ci->profile == profileId) computeInstances[n++] = reinterpret_cast<nvmlComputeInstance_t>(ci.get());
  }
  *count = n;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance) {
  FAKE_BEGIN("nvmlComputeInstanceDestroy");
  ComputeInstance* ci = as_ci(computeInstance);
  if (!ci) return NVML_ERROR_INVALID_ARGUMENT;
  ci->alive = false;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long* eventTypes) {
  FAKE_DEVICE("nvmlDeviceGetSupportedEventTypes", device);
  *eventTypes = gpu->events ? (nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError | nvmlEventTypePState |
                               nvmlEventTypeXidCriticalError)
                            : 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  FAKE_BEGIN("nvmlEventSetCreate");
  if (auto r = injected("nvmlEventSetCreate", nullptr)) return *r;
  auto* s = new EventSet;
  g_state.sets.insert(s);
  *set = reinterpret_cast<nvmlEventSet_t>(s);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set) {
  FAKE_DEVICE("nvmlDeviceRegisterEvents", device);
  auto* s = reinterpret_cast<EventSet*>(set);
  if (!g_state.sets.count(s)) return NVML_ERROR_INVALID_ARGUMENT;
  if (!gpu->events) return NVML_ERROR_NOT_SUPPORTED;
  s->registered[gpu] |= eventTypes;
  return NVML_SUCCESS;
}

// Never sleeps: a test must not wait on the double, whatever the timeout.
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int /*timeoutms*/) {
  FAKE_BEGIN("nvmlEventSetWait_v2");
  auto* s = reinterpret_cast<EventSet*>(set);
  if (!g_state.sets.count(s)) return NVML_ERROR_INVALID_ARGUMENT;
  if (auto r = injected("nvmlEventSetWait_v2", nullptr)) return *r;
  for (auto it = g_state.pending.begin(); it != g_state.pending.end(); ++it) {
    auto reg = s->registered.find(it->gpu);
    if (reg == s->registered.end() || (reg->second & it->type) == 0) continue;
    *data = {};
    data->device = reinterpret_cast<nvmlDevice_t>(static_cast<Handle*>(it->gpu));
    data->eventType = it->type;
    data->eventData = it->data;
    data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFF;
    g_state.pending.erase(it);
    return NVML_SUCCESS;
  }
  return NVML_ERROR_TIMEOUT;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  FAKE_BEGIN("nvmlEventSetFree");
  auto* s = reinterpret_cast<EventSet*>(set);
  if (!g_state.sets.erase(s)) return NVML_ERROR_INVALID_ARGUMENT;
  delete s;
  return NVML_SUCCESS;
}

}  // extern "C"
}  // namespace cnlab::agent::nvml

// -- test controls: not NVML; a test finds them with dlsym. Each returns 0, or -1 when NVML is not
//    initialized or the GPU index is out of range.
namespace {
using namespace cnlab::agent::nvml;  // NOLINT

Gpu* control_gpu(unsigned index) {
  if (g_state.init_count == 0 || index >= g_state.gpus.size()) return nullptr;
  return g_state.gpus[index].get();
}
}  // namespace

extern "C" {

// Queues an Xid critical error event for GPU `index`.
int fake_nvml_inject_xid(unsigned index, unsigned long long xid) {
  std::lock_guard<std::mutex> lock(g_mu);
  Gpu* gpu = control_gpu(index);
  if (!gpu) return -1;
  g_state.pending.push_back({gpu, nvmlEventTypeXidCriticalError, xid});
  return 0;
}

// Queues a double-bit (uncorrectable) ECC event for GPU `index`.
int fake_nvml_inject_double_bit_ecc(unsigned index) {
  std::lock_guard<std::mutex> lock(g_mu);
  Gpu* gpu = control_gpu(index);
  if (!gpu) return -1;
  g_state.pending.push_back({gpu, nvmlEventTypeDoubleBitEccError, 0});
  return 0;
}

// Sets the volatile uncorrectable ECC counter (-1: NOT_SUPPORTED).
int fake_nvml_set_ecc_count(unsigned index, long long count) {
  std::lock_guard<std::mutex> lock(g_mu);
  Gpu* gpu = control_gpu(index);
  if (!gpu) return -1;
  gpu->ecc = count;
  return 0;
}

int fake_nvml_set_processes(unsigned index, int count) {
  std::lock_guard<std::mutex> lock(g_mu);
  Gpu* gpu = control_gpu(index);
  if (!gpu) return -1;
  gpu->processes = count;
  return 0;
}

// How many times an NVML function was called since the library was loaded.
int fake_nvml_call_count(const char* name) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_calls.find(name);
  return it == g_calls.end() ? 0 : it->second;
}

// The live GPU instances of GPU `index` as "<profile id>@<start>/<compute instances>", comma
// separated in creation order ("9@0/1,14@4/1"), written to `out`; "" when none.
int fake_nvml_describe_mig(unsigned index, char* out, unsigned length) {
  std::lock_guard<std::mutex> lock(g_mu);
  Gpu* gpu = control_gpu(index);
  if (!gpu || length == 0) return -1;
  std::string text;
  for (const auto& gi : gpu->gis) {
    if (!gi->alive) continue;
    if (!text.empty()) text += ',';
    text += std::to_string(gi->shape->id) + "@" + std::to_string(gi->start) + "/" + std::to_string(gi->live_cis());
  }
  std::snprintf(out, length, "%s", text.c_str());
  return 0;
}

}  // extern "C"
