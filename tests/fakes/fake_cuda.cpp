// TEST DOUBLE of libcuda.so.1, NVIDIA's CUDA driver library, for machines without a GPU.
//
// Built as build/fakes/cuda/libcuda.so.1 (its own directory: it is found only by explicit path or
// LD_LIBRARY_PATH, never in place of a real driver). Compiled against the real cuda.h with
// __CUDA_API_VERSION_INTERNAL, so every function is defined under its ABI name (cuMemAlloc_v2,
// cuMemcpyHtoD_v2_ptds, the legacy cuMemAlloc, ...) and the compiler checks every signature. Linked
// with -Bsymbolic: the fake's own calls and the pointers cuGetProcAddress returns are the fake's
// functions, never those of an LD_PRELOADed interception library that defines the same names.
// Files: fake_cuda.cpp (devices, contexts, streams, events, modules, launches, test hooks),
// fake_cuda_memory.cpp (allocations, copies, arrays, pools, VMM, IPC), fake_cuda_proc.cpp
// (cuGetProcAddress and its table, cuGetExportTable), fake_cuda_checkpoint.cpp (the process
// checkpoint API), fake_cuda_state.{h,cpp} (configuration, the shared state file),
// fake_cuda_internal.h (the objects behind the handles).
//
// Configuration (environment, read at cuInit):
//   FAKE_CUDA_CONFIG=<file>   one line per device, fields key=value ("double quotes" for spaces),
//                             '#' starts a comment:
//       device name="NVIDIA H100 80GB HBM3" uuid=GPU-3f1c0a2b-9d4e-4c1a-8e7f-0123456789ab
//              memory_mib=81559 sms=132 cc=9.0 pci=0000:17:00.0
//     Every field is optional (defaults: the H100 above, 81559 MiB, 132 SMs, cc 9.0, uuid
//     GPU-fa4ec0da-c0de-4000-8000-<12 hex digits of the index>, pci 0000:<index+1>:00.0). The UUID
//     text's 32 hex digits are the 16 bytes of CUuuid. A bad line is reported on stderr with the
//     file, line number and the line, and cuInit returns CUDA_ERROR_INVALID_VALUE; a file without
//     device lines gives CUDA_ERROR_NO_DEVICE. Unset or unreadable (a note on stderr): one default
//     device. cuInit's result is kept for the life of the process (until fake_cuda_reset_state).
//   FAKE_CUDA_STATE_DIR=<dir> where the state shared by every process using the fake lives (created
//                             if absent; default /tmp/fake-cuda-<uid>). Processes sharing it must
//                             share a PID namespace.
//   FAKE_CUDA_ALLOC_DELAY_US  every device-memory allocation call (cuMemAlloc*, cuMemAllocManaged,
//                             cuMemAllocAsync, cuMemAllocFromPoolAsync, cuMemCreate, cuArrayCreate,
//                             cuArray3DCreate, cuMipmappedArrayCreate) sleeps that long after the
//                             memory is counted and before it returns (a test can kill a process
//                             mid-allocation). Default 0.
//   FAKE_CUDA_KERNEL_US       simulated duration of a kernel whose name carries none (default 10).
//
// Shared state: <dir>/<uuid>.v1.<boot>.state (<boot>: 8 hex digits of this boot's id, since clock
// and process start times restart at boot), one file per device UUID, mode 0666 (as a device node: every user's processes share the GPU), mapped by every
// process (the "GPU" is shared, as a real one is), created race-free (built under a temporary name,
// then link()ed into place). It holds, as lock-free std::atomic words: a table of 256 process rows
// (pid + start time packed in one word, so a reused pid is not confused; counted device-memory
// bytes; busy ns; launches), the kernel timeline and 4096 interprocess-event slots. A process takes
// its row at cuInit. Device used memory = the sum of the rows; a row whose process has exited (no
// /proc/<pid>/stat, another start time, or a zombie) is cleared when noticed: at cuMemGetInfo,
// fake_cuda_used_bytes, and whenever an allocation would not fit. So a killed process's memory
// comes back, as with the real driver (its busy ns leave its row then, not the device total).
//
// Memory: device memory is host memory, one memfd per allocation mapped MAP_SHARED (so another
// process can map the same bytes); a CUdeviceptr is the host address (readable by the test), and
// copies check that device-side ranges are allocated (else CUDA_ERROR_INVALID_VALUE).
// Counted sizes (what cuMemGetInfo and the rows see):
//   cuMemAlloc, cuMemAllocPitch (pitch = width rounded up to 512), cuMemAllocManaged:
//       the size rounded up to 2 MiB;
//   arrays: width * max(height,1) * max(depth,1) * element size * channels rounded up to 64 KiB;
//       mipmapped arrays: the sum of that over the levels (each level halves every non-zero
//       extent, never below 1); cuArrayGetMemoryRequirements / cuMipmappedArrayGetMemoryRequirements
//       report exactly that size (alignment 64 KiB). Arrays have no backing bytes;
//   pools: chunks of round_up(size, 2 MiB), each holding one allocation (see below);
//   cuMemCreate: the size (a multiple of the 2 MiB granularity, else CUDA_ERROR_INVALID_VALUE).
//   Memory imported from another process (IPC, cuMemImportFromShareableHandle) is counted to the
//   process that allocated it only.
// Two processes racing for the device's last bytes may both get CUDA_ERROR_OUT_OF_MEMORY; the
// device never holds more than its memory_mib.
//
// Stream-ordered allocation: each device has a default pool (release threshold 0). An allocation
// takes the smallest free reserved chunk that fits round_up(size, 2 MiB), else reserves a new chunk
// of that size (on OUT_OF_MEMORY the pool first releases its free chunks and retries). Freed
// allocations stay reserved. At cuStreamSynchronize, cuCtxSynchronize and cuEventSynchronize every
// pool of the device whose reserved memory exceeds its release threshold releases free chunks,
// newest first, until reserved <= threshold; cuMemPoolTrimTo does the same down to
// minBytesToKeep. USED_MEM_* count the chunks in use. Allocation and free take effect at once (not
// in stream order). A destroyed pool goes when its last allocation is freed.
//
// Kernel timeline (exact and cheap: a compute-share limiter is measured against it): each device
// has ONE timeline in its state file; it runs one kernel at a time, FIFO across all processes. A
// launch returns at once: start = max(now, device busy_until, the stream's last completion),
// busy_until = start + duration (a lock-free compare-and-swap on CLOCK_MONOTONIC ns), and the
// duration is added to this process's busy ns. No system call, lock or allocation on that path.
// A kernel's duration comes from its name: a trailing _<N>us ("spin_500us": 500 us, "noop_0us":
// zero; the identifier of a simple mangled name _Z<len><identifier>... counts too), otherwise
// FAKE_CUDA_KERNEL_US. Synchronisations sleep (clock_nanosleep) until the completion time of the
// work they wait for; queries compare it with now. The legacy NULL stream waits for, and is waited
// for by, every blocking stream of its context; CU_STREAM_NON_BLOCKING streams are independent;
// the per-thread default stream (CU_STREAM_PER_THREAD, or NULL in the _ptsz/_ptds entry points) is
// an ordinary blocking stream of the calling thread. Synchronous copies and memsets wait for the
// legacy stream (the per-thread stream in _ptds), take no time themselves, and cuMemFree waits for
// its context's work, as the real driver does. An event completes at max(record time, the
// stream's last completion); cuEventElapsedTime is the difference in ms.
//
// Devices: cuDeviceGetAttribute gives H100 figures (compute capability and SM count from the
// config); any other attribute of the enum reads 0, one outside it is CUDA_ERROR_INVALID_VALUE.
// Where the driver's documentation is silent the fake chooses: cuMemFree(0) succeeds; an address
// cuMemGetAddressRange does not know is CUDA_ERROR_NOT_FOUND; releasing a primary context nobody
// retained is CUDA_ERROR_INVALID_CONTEXT; the legacy 32-bit entry points (cuMemAlloc, ...) map their
// memory below 4 GiB (MAP_32BIT).
//
// Contexts: the current context is per thread (a stack). A primary context is the same handle at
// every retain; its last release or a reset destroys what it holds (streams, events, modules,
// arrays, allocations) and calls that find it current then return CUDA_ERROR_CONTEXT_IS_DESTROYED.
//
// IPC: a CUipcMemHandle carries a magic, the exporter's pid and start time, its memfd number, the
// allocation id and size and the device UUID; the importer opens /proc/<pid>/fd/<n> (checking the
// memfd's name "fake-cuda-<pid>-<id>-<uuid>"), maps it and sees the same bytes. Opening a handle in
// the process that exported it returns CUDA_ERROR_INVALID_CONTEXT, as the real driver does; opening
// it again in the same process returns the same pointer (reference counted until
// cuIpcCloseMemHandle); a handle whose exporter or allocation is gone gives CUDA_ERROR_INVALID_HANDLE.
// Interprocess events (CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING) keep their completion time
// in a slot of the state file; an opened handle whose event was destroyed behaves as completed.
// VMM: cuMemExportToShareableHandle(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) returns a new fd of
// the allocation's memfd (the handle must have been created with that type requested);
// cuMemImportFromShareableHandle accepts such an fd in any process. Access is per 2 MiB granule:
// cuMemSetAccess takes granule-aligned ranges of mapped memory, and copies need the access.
//
// fork: a child starts with no CUDA state (as if never initialised: it calls cuInit again) and
// never touches its parent's rows; the parent is unaffected.
//
// cuGetProcAddress / cuGetProcAddress_v2: see fake_cuda_proc.cpp (one table of every export, with
// the CUDA version that introduced each ABI variant, from cudaTypedefs.h's PFN_<name>_v<version>).
// cuGetExportTable: CUDA_ERROR_NOT_SUPPORTED, except for the test UUID "cnlab-fake-table" (those 16
// ASCII bytes): a static table whose first word is 0x636e6c6162746231 ("cnlabtb1" read as a
// big-endian word), then its size in bytes, then int (*)(int) returning its argument plus one.
//
// Test hooks (extern "C", found with dlsym; `device` is an ordinal of this process's config, pid 0
// means every process):
//   unsigned long long fake_cuda_busy_ns(int device, int pid);   simulated kernel time queued by
//       that process (pid 0: by every process since the state file was created, exited ones too)
//   unsigned long long fake_cuda_used_bytes(int device);         counted memory of live processes
//   unsigned long long fake_cuda_process_used_bytes(int device, int pid);   that process's counted
//       memory (pid 0: every live process, as fake_cuda_used_bytes)
//   unsigned long long fake_cuda_busy_until_ns(int device);      CLOCK_MONOTONIC ns at which the
//       device's queued work ends
//   unsigned long long fake_cuda_launches(int device, int pid);  kernels launched (live rows)
//   int fake_cuda_export_table_calls(void);                      cuGetExportTable calls, any UUID
//   int fake_cuda_process_busy(const char* uuid, int* pids, unsigned long long* busy_ns, int max);
//       every live process's busy ns on the device with that UUID, read from the state file
//       without cuInit (the NVML test double's process utilization); returns how many
//   void fake_cuda_reset_state(void);  frees everything this process holds (its rows included) and
//       forgets cuInit: the next cuInit re-reads the environment. Call it with no other thread in
//       the fake.
// Hooks before cuInit (or for a bad device) return 0.
//
// Not implemented: graphs, stream capture, textures/surfaces, peer access, copies to or from
// arrays, cuLaunchHostFunc; only the functions in fake_cuda_proc.cpp's table exist.
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "fake_cuda_internal.h"

namespace cnlab::fake_cuda {

Driver& g = *new Driver;

namespace {

std::atomic<uint64_t> g_epochs{1};
uint64_t next_epoch() { return g_epochs.fetch_add(1, std::memory_order_relaxed) + 1; }

struct PerThreadStream {
  Context* ctx;
  uint64_t epoch;
  Stream* stream;
};

struct ThreadState {
  uint64_t generation = 0;
  std::vector<Context*> stack;
  std::vector<PerThreadStream> per_thread;
};

thread_local ThreadState t_state;

ThreadState& thread_state() {
  ThreadState& t = t_state;
  uint64_t gen = g.generation.load(std::memory_order_acquire);
  if (t.generation != gen) {
    t.stack.clear();
    t.per_thread.clear();
    t.generation = gen;
  }
  return t;
}

Stream* new_stream(Context& ctx, unsigned flags, int priority) {  // under g.mu
  Stream* s;
  if (!g.free_streams.empty()) {
    s = g.free_streams.back();
    g.free_streams.pop_back();
  } else {
    s = new Stream;
  }
  s->ctx = &ctx;
  s->flags = flags;
  s->priority = priority;
  s->legacy = false;
  s->blocking = (flags & CU_STREAM_NON_BLOCKING) == 0;
  s->last_end.store(0, std::memory_order_relaxed);
  s->magic.store(kStreamMagic, std::memory_order_release);
  ctx.streams.push_back(s);
  return s;
}

void retire_stream(Stream* s) {  // under g.mu
  s->magic.store(kDeadMagic, std::memory_order_release);
  g.free_streams.push_back(s);
}

void retire_event(Event* e, bool owner) {  // under g.mu
  e->magic.store(kDeadMagic, std::memory_order_release);
  if (owner && e->shared && !e->imported) release_event_slot(*e->shared, e->slot);
  e->shared = nullptr;
  e->slot = -1;
  e->imported = false;
  e->done = &e->local_done;
  g.free_events.push_back(e);
}

void retire_function(Function* f) {
  f->magic.store(kDeadMagic, std::memory_order_release);
  g.dead_functions.push_back(f);
}

void init_legacy_stream(Context& c) {
  c.legacy.ctx = &c;
  c.legacy.legacy = true;
  c.legacy.blocking = true;
  c.legacy.magic.store(kStreamMagic, std::memory_order_release);
}

void activate(Context& c) {  // under g.mu
  c.legacy.last_end.store(0, std::memory_order_relaxed);
  c.blocking_end.store(0, std::memory_order_relaxed);
  c.all_end.store(0, std::memory_order_relaxed);
  c.epoch.store(next_epoch(), std::memory_order_relaxed);
  c.alive.store(true, std::memory_order_release);
}

// Destroys what a context holds. `owner`: this process made it (false in a forked child).
void destroy_context(Context& c, bool owner) {  // under g.mu
  c.alive.store(false, std::memory_order_release);
  c.epoch.store(next_epoch(), std::memory_order_relaxed);
  for (Stream* s : c.streams) retire_stream(s);
  c.streams.clear();
  for (Event* e : c.events) retire_event(e, owner);
  c.events.clear();
  for (Module* m : c.modules) {
    for (auto& [name, f] : m->functions) retire_function(f);
    m->functions.clear();
    m->magic = kDeadMagic;
    g.modules.erase(m);
    g.dead_modules.push_back(m);
  }
  c.modules.clear();
  for (Array* a : c.arrays) {
    if (owner) free_array_memory(*c.device, a->counted);
    g.arrays.erase(a);
    delete a;
  }
  c.arrays.clear();
  for (MipmappedArray* m : c.mipmaps) {
    if (owner) free_array_memory(*c.device, m->counted);
    g.mipmaps.erase(m);
    delete m;
  }
  c.mipmaps.clear();
  if (owner) free_context_memory(c);
}

Context* known_context(CUcontext handle) {  // under g.mu
  auto* c = reinterpret_cast<Context*>(handle);
  if (!c) return nullptr;
  for (auto& d : g.devices) {
    if (d->primary.get() == c) return c;
  }
  for (auto& owned : g.contexts) {
    if (owned.get() == c) return c;
  }
  return nullptr;
}

CUresult create_context(CUcontext* pctx, unsigned flags, CUdevice dev) {
  REQUIRE_INIT();
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  Device* d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  auto c = std::make_unique<Context>();
  c->device = d;
  c->flags = flags;
  init_legacy_stream(*c);
  activate(*c);
  Context* raw = c.get();
  g.contexts.push_back(std::move(c));
  thread_state().stack.push_back(raw);
  *pctx = reinterpret_cast<CUcontext>(raw);
  return CUDA_SUCCESS;
}

// Drops every object and OS resource of this process. `owner` false in a forked child: the
// parent's shared rows and slots are left alone.
void reset_locked(bool owner) {
  g.initialized.store(false, std::memory_order_release);
  for (auto& d : g.devices) {
    if (d->primary->alive.load()) destroy_context(*d->primary, owner);
  }
  for (auto& c : g.contexts) {
    if (c->alive.load()) destroy_context(*c, owner);
  }
  free_all_memory(owner);
  for (Library* lib : g.libraries) {
    for (auto& [name, k] : lib->kernels) retire_function(k);
    delete lib;
  }
  g.libraries.clear();
  for (auto& d : g.devices) {
    if (owner && d->row) release_row(*d->row);
    d->row = nullptr;
    close_shared(d->shared);
    d->shared = nullptr;
    g.old_devices.push_back(std::move(d));
  }
  g.devices.clear();
  g.init_attempted = false;
  g.init_result = CUDA_SUCCESS;
  g.generation.fetch_add(1, std::memory_order_acq_rel);
}

CUresult init_locked() {
  Config config;
  CUresult r = load_config(config);
  if (r != CUDA_SUCCESS) return r;
  g.self = self_key();
  std::vector<std::unique_ptr<Device>> devices;
  auto undo = [&] {
    for (auto& d : devices) {
      if (d->row) release_row(*d->row);
      close_shared(d->shared);
    }
  };
  for (size_t i = 0; i < config.devices.size(); ++i) {
    auto d = std::make_unique<Device>();
    d->ordinal = static_cast<int>(i);
    d->cfg = config.devices[i];
    std::string error;
    d->shared = open_shared(config.state_dir, d->cfg, error);
    if (!d->shared) {
      std::fprintf(stderr, "fake_cuda: %s\n", error.c_str());
      undo();
      return CUDA_ERROR_OPERATING_SYSTEM;
    }
    d->row = claim_row(*d->shared, g.self);
    if (!d->row) {
      std::fprintf(stderr, "fake_cuda: %d processes already use device %s (state in %s)\n", kMaxProcesses,
                   d->cfg.uuid_text.c_str(), config.state_dir.c_str());
      close_shared(d->shared);
      undo();
      return CUDA_ERROR_OPERATING_SYSTEM;
    }
    d->primary = std::make_unique<Context>();
    d->primary->device = d.get();
    d->primary->primary = true;
    init_legacy_stream(*d->primary);
    auto* pool = new Pool;
    pool->device = d.get();
    pool->is_default = true;
    pool->props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pool->props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    pool->props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    pool->props.location.id = d->ordinal;
    g.pools.insert(pool);
    d->default_pool = d->current_pool = pool;
    devices.push_back(std::move(d));
  }
  g.config = std::move(config);
  g.devices = std::move(devices);
  g.initialized.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}

// fork: the child forgets the parent's CUDA state (the parent keeps it).
void before_fork() { g.mu.lock(); }
void after_fork_parent() { g.mu.unlock(); }
void after_fork_child() {
  g.mu.unlock();
  std::lock_guard<std::mutex> lock(g.mu);
  if (g.initialized.load() || g.init_attempted) reset_locked(/*owner=*/false);
}

__attribute__((constructor)) void register_fork_handlers() {
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

// The simulated duration of a kernel named `name`: a trailing _<N>us, else `fallback`.
uint64_t duration_from_name(std::string_view name, uint64_t fallback) {
  if (name.size() > 2 && name.substr(0, 2) == "_Z") {  // _Z<len><identifier>...
    size_t i = 2, len = 0;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9') len = len * 10 + static_cast<size_t>(name[i++] - '0');
    if (len > 0 && i + len <= name.size()) name = name.substr(i, len);
  }
  if (name.size() < 4 || name.substr(name.size() - 2) != "us") return fallback;
  size_t end = name.size() - 2, begin = end;
  while (begin > 0 && name[begin - 1] >= '0' && name[begin - 1] <= '9') --begin;
  if (begin == end || begin == 0 || name[begin - 1] != '_' || end - begin > 12) return fallback;
  uint64_t us = 0;
  for (size_t i = begin; i < end; ++i) us = us * 10 + static_cast<uint64_t>(name[i] - '0');
  return us * 1000;
}

Function* new_function(const std::string& name, Context* ctx, uint32_t magic) {
  auto* f = new Function;
  f->name = name;
  f->ctx = ctx;
  f->duration_ns = duration_from_name(name, g.config.kernel_ns);
  f->magic.store(magic, std::memory_order_release);
  return f;
}

CUresult new_module(CUmodule* module) {
  REQUIRE_CONTEXT(ctx);
  std::lock_guard<std::mutex> lock(g.mu);
  auto* m = new Module;
  m->ctx = ctx;
  ctx->modules.insert(m);
  g.modules.insert(m);
  *module = reinterpret_cast<CUmodule>(m);
  return CUDA_SUCCESS;
}

Stream* per_thread_stream(Context& ctx) {
  ThreadState& t = thread_state();
  uint64_t epoch = ctx.epoch.load(std::memory_order_relaxed);
  for (auto& p : t.per_thread) {
    if (p.ctx == &ctx && p.epoch == epoch) return p.stream;
  }
  std::lock_guard<std::mutex> lock(g.mu);
  Stream* s = new_stream(ctx, 0, 0);
  t.per_thread.erase(std::remove_if(t.per_thread.begin(), t.per_thread.end(),
                                    [&](const PerThreadStream& p) { return p.ctx == &ctx; }),
                     t.per_thread.end());
  t.per_thread.push_back({&ctx, epoch, s});
  return s;
}

// What a CUipcEventHandle carries.
struct IpcEventWire {
  uint64_t magic;
  uint32_t slot;
  uint32_t reserved;
  uint64_t generation;
  uint64_t exporter;
  CUuuid uuid;
  char pad[16];
};
static_assert(sizeof(IpcEventWire) == sizeof(CUipcEventHandle));
constexpr uint64_t kIpcEventMagic = 0x31455043464E4C43ull;  // "CLNFCPE1" as little-endian text

bool valid_event(const Event* e) { return e && e->magic.load(std::memory_order_acquire) == kEventMagic; }

// Completion time of an event's last record (0: never recorded, or its IPC slot was reused).
uint64_t event_done(const Event& e) {
  uint64_t t = e.done->load(std::memory_order_acquire);
  if (e.shared && e.shared->events[e.slot].generation.load(std::memory_order_acquire) != e.generation) return 0;
  return t;
}

CUresult record_event(CUevent hEvent, CUstream hStream, bool per_thread) {
  REQUIRE_INIT();
  auto* e = reinterpret_cast<Event*>(hEvent);
  if (!valid_event(e)) return CUDA_ERROR_INVALID_HANDLE;
  CUresult error;
  Stream* s = resolve_stream(hStream, per_thread, &error);
  if (!s) return error;
  if (s->ctx != e->ctx) return CUDA_ERROR_INVALID_HANDLE;
  if (!s->ctx->alive.load(std::memory_order_acquire)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  if (e->shared && e->shared->events[e->slot].generation.load(std::memory_order_acquire) != e->generation) {
    return CUDA_SUCCESS;  // an opened IPC event whose exporter destroyed it: the slot is someone else's now
  }
  uint64_t t = std::max(now_ns(), stream_done(*s));
  e->done->store(t, std::memory_order_release);
  return CUDA_SUCCESS;
}

CUresult synchronize_stream(CUstream hStream, bool per_thread) {
  REQUIRE_INIT();
  CUresult error;
  Stream* s = resolve_stream(hStream, per_thread, &error);
  if (!s) return error;
  if (!s->ctx->alive.load(std::memory_order_acquire)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  sleep_until_ns(stream_done(*s));
  release_pools_at_sync(*s->ctx->device);
  return CUDA_SUCCESS;
}

CUresult query_stream(CUstream hStream, bool per_thread) {
  REQUIRE_INIT();
  CUresult error;
  Stream* s = resolve_stream(hStream, per_thread, &error);
  if (!s) return error;
  if (!s->ctx->alive.load(std::memory_order_acquire)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  return now_ns() >= stream_done(*s) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult wait_event(CUstream hStream, CUevent hEvent, unsigned flags, bool per_thread) {
  REQUIRE_INIT();
  if (flags & ~static_cast<unsigned>(CU_EVENT_WAIT_EXTERNAL)) return CUDA_ERROR_INVALID_VALUE;
  auto* e = reinterpret_cast<Event*>(hEvent);
  if (!valid_event(e)) return CUDA_ERROR_INVALID_HANDLE;
  CUresult error;
  Stream* s = resolve_stream(hStream, per_thread, &error);
  if (!s) return error;
  note_work(*s, event_done(*e));
  return CUDA_SUCCESS;
}

// The launch path: no system call, lock or allocation.
inline CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                       unsigned bz, unsigned shared_bytes, CUstream hStream, bool per_thread,
                       void** params, void** extra) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  auto* fn = reinterpret_cast<Function*>(f);
  if (!fn) return CUDA_ERROR_INVALID_HANDLE;
  uint32_t magic = fn->magic.load(std::memory_order_acquire);
  if (magic != kFunctionMagic && magic != kKernelMagic) return CUDA_ERROR_INVALID_HANDLE;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) return CUDA_ERROR_INVALID_VALUE;
  if (gy > 65535 || gz > 65535 || bx > 1024 || by > 1024 || bz > 64 ||
      static_cast<uint64_t>(bx) * by * bz > 1024 || shared_bytes > 232448) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (params && extra) return CUDA_ERROR_INVALID_VALUE;
  CUresult error;
  Stream* s = resolve_stream(hStream, per_thread, &error);
  if (!s) return error;
  Context& ctx = *s->ctx;
  if (!ctx.alive.load(std::memory_order_acquire)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  if (fn->ctx && fn->ctx != &ctx) return CUDA_ERROR_INVALID_HANDLE;
  Device& d = *ctx.device;
  const uint64_t duration = fn->duration_ns;
  const uint64_t now = now_ns();
  const uint64_t after = std::max(now, stream_done(*s));
  std::atomic<uint64_t>& busy = d.shared->busy_until_ns;
  uint64_t prev = busy.load(std::memory_order_acquire);
  uint64_t end;
  if (duration == 0) {
    end = std::max(after, prev);  // runs after what is queued, takes no time: nothing to publish
  } else {
    do {
      end = std::max(after, prev) + duration;
    } while (!busy.compare_exchange_weak(prev, end, std::memory_order_acq_rel, std::memory_order_acquire));
    d.row->busy_ns.fetch_add(duration, std::memory_order_relaxed);
    d.shared->total_busy_ns.fetch_add(duration, std::memory_order_relaxed);
  }
  d.row->launches.fetch_add(1, std::memory_order_relaxed);
  note_work(*s, end);
  return CUDA_SUCCESS;
}

CUresult launch_ex(const CUlaunchConfig* config, CUfunction f, void** params, void** extra, bool per_thread) {
  if (!config) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
  if (config->numAttrs > 0 && !config->attrs) return CUDA_ERROR_INVALID_VALUE;
  return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
                config->blockDimZ, config->sharedMemBytes, config->hStream, per_thread, params, extra);
}

// -- error names ----------------------------------------------------------------------------------

struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
};

#define E(code, text) {code, #code, text}
constexpr ErrorText kErrors[] = {
    E(CUDA_SUCCESS, "no error"),
    E(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
    E(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
    E(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
    E(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
    E(CUDA_ERROR_PROFILER_DISABLED, "profiler disabled while using external profiling tool"),
    E(CUDA_ERROR_PROFILER_NOT_INITIALIZED, "profiler not initialized: call cudaProfilerInitialize()"),
    E(CUDA_ERROR_PROFILER_ALREADY_STARTED, "profiler already started"),
    E(CUDA_ERROR_PROFILER_ALREADY_STOPPED, "profiler already stopped"),
    E(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"),
    E(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, "the provided PTX was compiled with an unsupported toolchain"),
    E(CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA-capable device(s) is/are busy or unavailable"),
    E(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
    E(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
    E(CUDA_ERROR_DEVICE_NOT_LICENSED, "device doesn't have valid Grid license"),
    E(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"),
    E(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
    E(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current"),
    E(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed"),
    E(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed"),
    E(CUDA_ERROR_ARRAY_IS_MAPPED, "array is mapped"),
    E(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"),
    E(CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device"),
    E(CUDA_ERROR_ALREADY_ACQUIRED, "resource already acquired"),
    E(CUDA_ERROR_NOT_MAPPED, "resource not mapped"),
    E(CUDA_ERROR_NOT_MAPPED_AS_ARRAY, "resource not mapped as array"),
    E(CUDA_ERROR_NOT_MAPPED_AS_POINTER, "resource not mapped as pointer"),
    E(CUDA_ERROR_ECC_UNCORRECTABLE, "uncorrectable ECC error encountered"),
    E(CUDA_ERROR_UNSUPPORTED_LIMIT, "limit is not supported on this architecture"),
    E(CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "exclusive-thread device already in use by a different thread"),
    E(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "peer access is not supported between these two devices"),
    E(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed"),
    E(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, "invalid OpenGL or DirectX context"),
    E(CUDA_ERROR_NVLINK_UNCORRECTABLE, "uncorrectable NVLink error detected during the execution"),
    E(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "PTX JIT compiler library not found"),
    E(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "the provided PTX was compiled with an unsupported toolchain."),
    E(CUDA_ERROR_JIT_COMPILATION_DISABLED, "PTX JIT compilation was disabled"),
    E(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, "the provided execution affinity is not supported"),
    E(CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC, "the provided PTX contains unsupported call to cudaDeviceSynchronize"),
    E(CUDA_ERROR_CONTAINED, "an exception occurred on the device that is now contained by the GPU's error containment capability"),
    E(CUDA_ERROR_INVALID_SOURCE, "device kernel image is invalid"),
    E(CUDA_ERROR_FILE_NOT_FOUND, "file not found"),
    E(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, "shared object symbol not found"),
    E(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "shared object initialization failed"),
    E(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS"),
    E(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
    E(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state"),
    E(CUDA_ERROR_LOSSY_QUERY, "attempted introspection would be semantically lossy"),
    E(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
    E(CUDA_ERROR_NOT_READY, "device not ready"),
    E(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
    E(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch"),
    E(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was terminated"),
    E(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING, "launch uses incompatible texturing mode"),
    E(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled"),
    E(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled"),
    E(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "cannot set while device is active in this process"),
    E(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
    E(CUDA_ERROR_ASSERT, "device-side assert triggered"),
    E(CUDA_ERROR_TOO_MANY_PEERS, "peer mapping resources exhausted"),
    E(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "part or all of the requested memory range is already mapped"),
    E(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "pointer does not correspond to a registered memory region"),
    E(CUDA_ERROR_HARDWARE_STACK_ERROR, "hardware stack error"),
    E(CUDA_ERROR_ILLEGAL_INSTRUCTION, "an illegal instruction was encountered"),
    E(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address"),
    E(CUDA_ERROR_INVALID_ADDRESS_SPACE, "operation not supported on global/shared address space"),
    E(CUDA_ERROR_INVALID_PC, "invalid program counter"),
    E(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
    E(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "too many blocks in cooperative launch"),
    E(CUDA_ERROR_TENSOR_MEMORY_LEAK, "tensor memory not completely freed"),
    E(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
    E(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
    E(CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized"),
    E(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "system has unsupported display driver / cuda driver combination"),
    E(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, "forward compatibility was attempted on non supported HW"),
    E(CUDA_ERROR_MPS_CONNECTION_FAILED, "MPS client failed to connect to the MPS control daemon or the MPS server"),
    E(CUDA_ERROR_MPS_RPC_FAILURE, "the remote procedural call between the MPS server and the MPS client failed"),
    E(CUDA_ERROR_MPS_SERVER_NOT_READY, "MPS server is not ready to accept new MPS client requests"),
    E(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, "the hardware resources required to create MPS client have been exhausted"),
    E(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED, "the hardware resources required to support device connections have been exhausted"),
    E(CUDA_ERROR_MPS_CLIENT_TERMINATED, "the MPS client has been terminated by the server"),
    E(CUDA_ERROR_CDP_NOT_SUPPORTED, "is using CUDA Dynamic Parallelism, but the current configuration doesn't support it"),
    E(CUDA_ERROR_CDP_VERSION_MISMATCH, "unsupported interaction between different versions of CUDA Dynamic Parallelism"),
    E(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing"),
    E(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture"),
    E(CUDA_ERROR_STREAM_CAPTURE_MERGE, "operation would result in a merge of separate capture sequences"),
    E(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "capture was not ended in the same stream as it began"),
    E(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "capturing stream has unjoined work"),
    E(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "dependency created on uncaptured work in another stream"),
    E(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "operation would make the legacy stream depend on a capturing blocking stream"),
    E(CUDA_ERROR_CAPTURED_EVENT, "operation not permitted on an event last recorded in a capturing stream"),
    E(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "attempt to terminate a thread-local capture sequence from another thread"),
    E(CUDA_ERROR_TIMEOUT, "wait operation timed out"),
    E(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"),
    E(CUDA_ERROR_EXTERNAL_DEVICE, "an async error has occured in external entity outside of CUDA"),
    E(CUDA_ERROR_INVALID_CLUSTER_SIZE, "a kernel launch error has occurred due to cluster misconfiguration"),
    E(CUDA_ERROR_FUNCTION_NOT_LOADED, "the function handle is not loaded when calling an API that requires a loaded function"),
    E(CUDA_ERROR_INVALID_RESOURCE_TYPE, "one or more resources passed in are not valid resource types for the operation"),
    E(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, "one or more resources are insufficient or non-applicable for the operation"),
    E(CUDA_ERROR_KEY_ROTATION, "an error happened during the key rotation sequence"),
    E(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef E

const ErrorText* find_error(CUresult code) {
  for (const auto& e : kErrors) {
    if (e.code == code) return &e;
  }
  return nullptr;
}

int attribute_value(const Device& d, CUdevice_attribute attrib, bool& known) {
  known = true;
  const DeviceConfig& c = d.cfg;
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
  std::sscanf(c.pci_bus_id.c_str(), "%x:%x:%x.%x", &domain, &bus, &dev, &fn);
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1980000;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: return 1;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return c.sms;
    case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT: return 0;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: return 0;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: return CU_COMPUTEMODE_DEFAULT;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return static_cast<int>(bus);
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return static_cast<int>(dev);
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: return static_cast<int>(domain);
    case CU_DEVICE_ATTRIBUTE_TCC_DRIVER: return 0;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 2619000;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 5120;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 52428800;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 3;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: return 32;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return c.cc_major;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return c.cc_minor;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return 233472;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD: return 0;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID: return d.ordinal;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS: return 0;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return 232448;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return 32;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES: return CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: return c.cc_major >= 9 ? 1 : 0;
    case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED: return 0;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED: return 0;
    default: break;
  }
  known = false;
  return 0;
}

}  // namespace

// -- helpers shared with the other files ----------------------------------------------------------

Context* current_context() {
  ThreadState& t = thread_state();
  return t.stack.empty() ? nullptr : t.stack.back();
}

Context* usable_context(CUresult* error) {
  if (!initialized()) {
    *error = CUDA_ERROR_NOT_INITIALIZED;
    return nullptr;
  }
  Context* c = current_context();
  if (!c) {
    *error = CUDA_ERROR_INVALID_CONTEXT;
    return nullptr;
  }
  if (!c->alive.load(std::memory_order_acquire)) {
    *error = CUDA_ERROR_CONTEXT_IS_DESTROYED;
    return nullptr;
  }
  return c;
}

Device* device_at(CUdevice ordinal) {
  if (ordinal < 0 || static_cast<size_t>(ordinal) >= g.devices.size()) return nullptr;
  return g.devices[static_cast<size_t>(ordinal)].get();
}

Device* device_by_uuid(const CUuuid& uuid) {
  for (auto& d : g.devices) {
    if (std::memcmp(d->cfg.uuid.bytes, uuid.bytes, sizeof uuid.bytes) == 0) return d.get();
  }
  return nullptr;
}

Stream* resolve_stream(CUstream handle, bool per_thread, CUresult* error) {
  if (!handle) handle = per_thread ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
  if (handle == CU_STREAM_LEGACY || handle == CU_STREAM_PER_THREAD) {
    Context* c = usable_context(error);
    if (!c) return nullptr;
    return handle == CU_STREAM_LEGACY ? &c->legacy : per_thread_stream(*c);
  }
  auto* s = reinterpret_cast<Stream*>(handle);
  if (s->magic.load(std::memory_order_acquire) != kStreamMagic) {
    *error = CUDA_ERROR_INVALID_HANDLE;
    return nullptr;
  }
  return s;
}

uint64_t stream_done(const Stream& s) {
  return s.legacy ? s.ctx->blocking_end.load(std::memory_order_acquire) : s.last_end.load(std::memory_order_acquire);
}

void note_work(Stream& s, uint64_t end) {
  atomic_max(s.last_end, end);
  if (s.blocking) atomic_max(s.ctx->blocking_end, end);
  atomic_max(s.ctx->all_end, end);
}

}  // namespace cnlab::fake_cuda

using namespace cnlab::fake_cuda;

extern "C" {

// -- initialisation and devices -------------------------------------------------------------------

CUresult cuInit(unsigned int Flags) {
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  if (g.initialized.load()) return CUDA_SUCCESS;
  if (g.init_attempted) return g.init_result;
  g.init_attempted = true;
  g.init_result = init_locked();
  return g.init_result;
}

CUresult cuDriverGetVersion(int* driverVersion) {
  if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = 13000;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* count) {
  REQUIRE_INIT();
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  *count = static_cast<int>(g.devices.size());
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  REQUIRE_INIT();
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  if (!device_at(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  REQUIRE_INIT();
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  Device* d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  size_t n = std::min(d->cfg.name.size(), static_cast<size_t>(len - 1));
  std::memcpy(name, d->cfg.name.data(), n);
  name[n] = 0;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  REQUIRE_INIT();
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  Device* d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  *uuid = d->cfg.uuid;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) { return cuDeviceGetUuid_v2(uuid, dev); }

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  REQUIRE_INIT();
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  Device* d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = d->cfg.total_bytes;
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
  size_t total = 0;
  CUresult r = cuDeviceTotalMem_v2(&total, dev);
  if (r == CUDA_SUCCESS) *bytes = static_cast<unsigned>(std::min<size_t>(total, 0xFFFFFFFFu));
  return r;
}

CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  REQUIRE_INIT();
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  Device* d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  if (attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  bool known = false;
  *pi = attribute_value(*d, attrib, known);  // an attribute the fake does not model reads 0
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
  REQUIRE_INIT();
  if (!pciBusId || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  Device* d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(pciBusId, static_cast<size_t>(len), "%s", d->cfg.pci_bus_id.c_str());
  return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult error, const char** pStr) {
  if (!pStr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = find_error(error);
  *pStr = e ? e->name : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char** pStr) {
  if (!pStr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = find_error(error);
  *pStr = e ? e->text : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// -- primary contexts -----------------------------------------------------------------------------

CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  REQUIRE_INIT();
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  Device* d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  Context& c = *d->primary;
  if (c.primary_refs++ == 0 || !c.alive.load()) activate(c);
  *pctx = reinterpret_cast<CUcontext>(&c);
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  REQUIRE_INIT();
  std::lock_guard<std::mutex> lock(g.mu);
  Device* d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  Context& c = *d->primary;
  if (c.primary_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--c.primary_refs == 0) destroy_context(c, /*owner=*/true);
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  REQUIRE_INIT();
  std::lock_guard<std::mutex> lock(g.mu);
  Device* d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  Context& c = *d->primary;
  if (c.alive.load()) destroy_context(c, /*owner=*/true);
  c.primary_refs = 0;
  c.flags = 0;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return cuDevicePrimaryCtxReset_v2(dev); }

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  REQUIRE_INIT();
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  Device* d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  *flags = d->primary->flags;
  *active = d->primary->alive.load() ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  REQUIRE_INIT();
  std::lock_guard<std::mutex> lock(g.mu);
  Device* d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  if (flags & ~0x1Fu) return CUDA_ERROR_INVALID_VALUE;
  d->primary->flags = flags;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) { return cuDevicePrimaryCtxSetFlags_v2(dev, flags); }

// -- contexts -------------------------------------------------------------------------------------

CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) { return create_context(pctx, flags, dev); }
CUresult cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) { return create_context(pctx, flags, dev); }

CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams, unsigned int flags,
                        CUdevice dev) {
  if (numParams < 0 || (numParams > 0 && !paramsArray)) return CUDA_ERROR_INVALID_VALUE;
  return create_context(pctx, flags, dev);
}

CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* ctxCreateParams, unsigned int flags, CUdevice dev) {
  if (ctxCreateParams && ctxCreateParams->numExecAffinityParams > 0 && !ctxCreateParams->execAffinityParams) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return create_context(pctx, flags, dev);
}

CUresult cuCtxDestroy_v2(CUcontext ctx) {
  REQUIRE_INIT();
  std::lock_guard<std::mutex> lock(g.mu);
  Context* c = known_context(ctx);
  if (!c || c->primary || !c->alive.load()) return CUDA_ERROR_INVALID_CONTEXT;
  destroy_context(*c, /*owner=*/true);
  auto& stack = thread_state().stack;
  if (!stack.empty() && stack.back() == c) stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult cuCtxDestroy(CUcontext ctx) { return cuCtxDestroy_v2(ctx); }

CUresult cuCtxSetCurrent(CUcontext ctx) {
  REQUIRE_INIT();
  auto& stack = thread_state().stack;
  if (!ctx) {
    if (!stack.empty()) stack.pop_back();
    return CUDA_SUCCESS;
  }
  Context* c;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    c = known_context(ctx);
  }
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  if (stack.empty()) {
    stack.push_back(c);
  } else {
    stack.back() = c;
  }
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext* pctx) {
  REQUIRE_INIT();
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  *pctx = reinterpret_cast<CUcontext>(current_context());
  return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  REQUIRE_INIT();
  Context* c;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    c = known_context(ctx);
  }
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  thread_state().stack.push_back(c);
  return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent(CUcontext ctx) { return cuCtxPushCurrent_v2(ctx); }

CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  REQUIRE_INIT();
  auto& stack = thread_state().stack;
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  Context* c = stack.back();
  stack.pop_back();
  if (pctx) *pctx = reinterpret_cast<CUcontext>(c);
  return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent(CUcontext* pctx) { return cuCtxPopCurrent_v2(pctx); }

CUresult cuCtxGetDevice(CUdevice* device) {
  REQUIRE_INIT();
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_CONTEXT(c);
  *device = c->device->ordinal;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  if (!ctx) return cuCtxGetDevice(device);
  REQUIRE_INIT();
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  Context* c = known_context(ctx);
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  if (!c->alive.load()) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *device = c->device->ordinal;
  return CUDA_SUCCESS;
}

static CUresult synchronize_context(Context& c) {
  sleep_until_ns(c.all_end.load(std::memory_order_acquire));
  release_pools_at_sync(*c.device);
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) {
  REQUIRE_CONTEXT(c);
  return synchronize_context(*c);
}

CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  if (!ctx) return cuCtxSynchronize();
  REQUIRE_INIT();
  Context* c;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    c = known_context(ctx);
  }
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  if (!c->alive.load()) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  return synchronize_context(*c);
}

CUresult cuCtxGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  REQUIRE_CONTEXT(c);
  if (leastPriority) *leastPriority = 0;
  if (greatestPriority) *greatestPriority = -5;
  return CUDA_SUCCESS;
}

// -- streams --------------------------------------------------------------------------------------

CUresult cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags, int priority) {
  REQUIRE_INIT();
  if (!phStream || (flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING))) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_CONTEXT(c);
  std::lock_guard<std::mutex> lock(g.mu);
  *phStream = reinterpret_cast<CUstream>(new_stream(*c, flags, std::clamp(priority, -5, 0)));
  return CUDA_SUCCESS;
}

CUresult cuStreamCreate(CUstream* phStream, unsigned int Flags) { return cuStreamCreateWithPriority(phStream, Flags, 0); }

CUresult cuStreamDestroy_v2(CUstream hStream) {
  REQUIRE_INIT();
  if (!hStream || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> lock(g.mu);
  auto* s = reinterpret_cast<Stream*>(hStream);
  if (s->magic.load() != kStreamMagic || s->legacy) return CUDA_ERROR_INVALID_HANDLE;
  auto& list = s->ctx->streams;
  list.erase(std::remove(list.begin(), list.end(), s), list.end());
  retire_stream(s);
  return CUDA_SUCCESS;
}

CUresult cuStreamDestroy(CUstream hStream) { return cuStreamDestroy_v2(hStream); }

CUresult cuStreamSynchronize(CUstream hStream) { return synchronize_stream(hStream, false); }
CUresult cuStreamSynchronize_ptsz(CUstream hStream) { return synchronize_stream(hStream, true); }
CUresult cuStreamQuery(CUstream hStream) { return query_stream(hStream, false); }
CUresult cuStreamQuery_ptsz(CUstream hStream) { return query_stream(hStream, true); }
CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  return wait_event(hStream, hEvent, Flags, false);
}
CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  return wait_event(hStream, hEvent, Flags, true);
}

static CUresult stream_get(CUstream hStream, bool per_thread, int* priority, unsigned* flags, CUcontext* ctx) {
  REQUIRE_INIT();
  if (!priority && !flags && !ctx) return CUDA_ERROR_INVALID_VALUE;
  CUresult error;
  Stream* s = resolve_stream(hStream, per_thread, &error);
  if (!s) return error;
  if (priority) *priority = s->priority;
  if (flags) *flags = s->flags;
  if (ctx) *ctx = reinterpret_cast<CUcontext>(s->ctx);
  return CUDA_SUCCESS;
}

CUresult cuStreamGetPriority(CUstream hStream, int* priority) {
  return priority ? stream_get(hStream, false, priority, nullptr, nullptr) : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuStreamGetPriority_ptsz(CUstream hStream, int* priority) {
  return priority ? stream_get(hStream, true, priority, nullptr, nullptr) : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuStreamGetFlags(CUstream hStream, unsigned int* flags) {
  return flags ? stream_get(hStream, false, nullptr, flags, nullptr) : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuStreamGetFlags_ptsz(CUstream hStream, unsigned int* flags) {
  return flags ? stream_get(hStream, true, nullptr, flags, nullptr) : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuStreamGetCtx(CUstream hStream, CUcontext* pctx) {
  return pctx ? stream_get(hStream, false, nullptr, nullptr, pctx) : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuStreamGetCtx_ptsz(CUstream hStream, CUcontext* pctx) {
  return pctx ? stream_get(hStream, true, nullptr, nullptr, pctx) : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuStreamGetCtx_v2(CUstream hStream, CUcontext* pCtx, CUgreenCtx* pGreenCtx) {
  if (!pCtx && !pGreenCtx) return CUDA_ERROR_INVALID_VALUE;
  if (pGreenCtx) *pGreenCtx = nullptr;  // no green contexts here
  CUcontext c = nullptr;
  CUresult r = stream_get(hStream, false, nullptr, nullptr, &c);
  if (r == CUDA_SUCCESS && pCtx) *pCtx = c;
  return r;
}
CUresult cuStreamGetCtx_v2_ptsz(CUstream hStream, CUcontext* pCtx, CUgreenCtx* pGreenCtx) {
  if (!pCtx && !pGreenCtx) return CUDA_ERROR_INVALID_VALUE;
  if (pGreenCtx) *pGreenCtx = nullptr;
  CUcontext c = nullptr;
  CUresult r = stream_get(hStream, true, nullptr, nullptr, &c);
  if (r == CUDA_SUCCESS && pCtx) *pCtx = c;
  return r;
}

// -- events ---------------------------------------------------------------------------------------

CUresult cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  REQUIRE_INIT();
  const unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (!phEvent || (Flags & ~known)) return CUDA_ERROR_INVALID_VALUE;
  if ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING)) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_CONTEXT(c);
  std::lock_guard<std::mutex> lock(g.mu);
  int slot = -1;
  SharedDevice* shared = nullptr;
  if (Flags & CU_EVENT_INTERPROCESS) {
    shared = c->device->shared;
    slot = claim_event_slot(*shared, g.self);
    if (slot < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Event* e;
  if (!g.free_events.empty()) {
    e = g.free_events.back();
    g.free_events.pop_back();
  } else {
    e = new Event;
  }
  e->ctx = c;
  e->flags = Flags;
  e->local_done.store(0, std::memory_order_relaxed);
  e->done = &e->local_done;
  e->imported = false;
  e->shared = shared;
  e->slot = slot;
  if (shared) {
    e->done = &shared->events[slot].done_ns;
    e->generation = shared->events[slot].generation.load();
  }
  e->magic.store(kEventMagic, std::memory_order_release);
  c->events.insert(e);
  *phEvent = reinterpret_cast<CUevent>(e);
  return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent hEvent, CUstream hStream) { return record_event(hEvent, hStream, false); }
CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) { return record_event(hEvent, hStream, true); }

CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags) {
  if (flags & ~static_cast<unsigned>(CU_EVENT_RECORD_EXTERNAL)) return CUDA_ERROR_INVALID_VALUE;
  return record_event(hEvent, hStream, false);
}
CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags) {
  if (flags & ~static_cast<unsigned>(CU_EVENT_RECORD_EXTERNAL)) return CUDA_ERROR_INVALID_VALUE;
  return record_event(hEvent, hStream, true);
}

CUresult cuEventQuery(CUevent hEvent) {
  REQUIRE_INIT();
  auto* e = reinterpret_cast<Event*>(hEvent);
  if (!valid_event(e)) return CUDA_ERROR_INVALID_HANDLE;
  return now_ns() >= event_done(*e) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuEventSynchronize(CUevent hEvent) {
  REQUIRE_INIT();
  auto* e = reinterpret_cast<Event*>(hEvent);
  if (!valid_event(e)) return CUDA_ERROR_INVALID_HANDLE;
  sleep_until_ns(event_done(*e));
  release_pools_at_sync(*e->ctx->device);
  return CUDA_SUCCESS;
}

CUresult cuEventElapsedTime_v2(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  REQUIRE_INIT();
  if (!pMilliseconds) return CUDA_ERROR_INVALID_VALUE;
  auto* a = reinterpret_cast<Event*>(hStart);
  auto* b = reinterpret_cast<Event*>(hEnd);
  if (!valid_event(a) || !valid_event(b)) return CUDA_ERROR_INVALID_HANDLE;
  if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  uint64_t ta = event_done(*a), tb = event_done(*b);
  if (ta == 0 || tb == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (now_ns() < std::max(ta, tb)) return CUDA_ERROR_NOT_READY;
  *pMilliseconds = static_cast<float>(static_cast<double>(static_cast<int64_t>(tb - ta)) / 1e6);
  return CUDA_SUCCESS;
}

CUresult cuEventElapsedTime(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  return cuEventElapsedTime_v2(pMilliseconds, hStart, hEnd);
}

CUresult cuEventDestroy_v2(CUevent hEvent) {
  REQUIRE_INIT();
  std::lock_guard<std::mutex> lock(g.mu);
  auto* e = reinterpret_cast<Event*>(hEvent);
  if (!valid_event(e)) return CUDA_ERROR_INVALID_HANDLE;
  e->ctx->events.erase(e);
  retire_event(e, /*owner=*/true);
  return CUDA_SUCCESS;
}

CUresult cuEventDestroy(CUevent hEvent) { return cuEventDestroy_v2(hEvent); }

CUresult cuIpcGetEventHandle(CUipcEventHandle* pHandle, CUevent event) {
  REQUIRE_INIT();
  if (!pHandle) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  auto* e = reinterpret_cast<Event*>(event);
  if (!valid_event(e)) return CUDA_ERROR_INVALID_HANDLE;
  if (!(e->flags & CU_EVENT_INTERPROCESS) || !e->shared) return CUDA_ERROR_INVALID_VALUE;
  IpcEventWire wire{};
  wire.magic = kIpcEventMagic;
  wire.slot = static_cast<uint32_t>(e->slot);
  wire.generation = e->generation;
  wire.exporter = g.self;
  wire.uuid = e->ctx->device->cfg.uuid;
  std::memcpy(pHandle, &wire, sizeof wire);
  return CUDA_SUCCESS;
}

CUresult cuIpcOpenEventHandle(CUevent* phEvent, CUipcEventHandle handle) {
  REQUIRE_INIT();
  if (!phEvent) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_CONTEXT(c);
  IpcEventWire wire;
  std::memcpy(&wire, &handle, sizeof wire);
  if (wire.magic != kIpcEventMagic || wire.slot >= kMaxIpcEvents) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> lock(g.mu);
  Device* d = device_by_uuid(wire.uuid);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  IpcEventSlot& slot = d->shared->events[wire.slot];
  if (slot.generation.load() != wire.generation || slot.owner.load() == kNoProcess) return CUDA_ERROR_INVALID_HANDLE;
  Event* e;
  if (!g.free_events.empty()) {
    e = g.free_events.back();
    g.free_events.pop_back();
  } else {
    e = new Event;
  }
  e->ctx = c;
  e->flags = CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING;
  e->shared = d->shared;
  e->slot = static_cast<int>(wire.slot);
  e->generation = wire.generation;
  e->imported = true;
  e->done = &slot.done_ns;
  e->magic.store(kEventMagic, std::memory_order_release);
  c->events.insert(e);
  *phEvent = reinterpret_cast<CUevent>(e);
  return CUDA_SUCCESS;
}

// -- modules, libraries and functions -------------------------------------------------------------

CUresult cuModuleLoad(CUmodule* module, const char* fname) {
  REQUIRE_INIT();
  if (!module || !fname) return CUDA_ERROR_INVALID_VALUE;
  if (access(fname, R_OK) != 0) return CUDA_ERROR_FILE_NOT_FOUND;
  return new_module(module);
}

CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  REQUIRE_INIT();
  if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
  return new_module(module);
}

CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int numOptions, CUjit_option* options,
                            void** optionValues) {
  REQUIRE_INIT();
  if (!module || !image || (numOptions > 0 && (!options || !optionValues))) return CUDA_ERROR_INVALID_VALUE;
  return new_module(module);
}

CUresult cuModuleUnload(CUmodule hmod) {
  REQUIRE_INIT();
  std::lock_guard<std::mutex> lock(g.mu);
  auto* m = reinterpret_cast<Module*>(hmod);
  if (!g.modules.count(m)) return CUDA_ERROR_INVALID_HANDLE;
  for (auto& [name, f] : m->functions) retire_function(f);
  m->functions.clear();
  m->magic = kDeadMagic;
  m->ctx->modules.erase(m);
  g.modules.erase(m);
  g.dead_modules.push_back(m);
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  REQUIRE_INIT();
  if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  auto* m = reinterpret_cast<Module*>(hmod);
  if (!g.modules.count(m)) return CUDA_ERROR_INVALID_HANDLE;
  Function*& f = m->functions[name];
  if (!f) f = new_function(name, m->ctx, kFunctionMagic);
  *hfunc = reinterpret_cast<CUfunction>(f);
  return CUDA_SUCCESS;
}

CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jitOptions, void** jitOptionsValues,
                           unsigned int numJitOptions, CUlibraryOption* libraryOptions,
                           void** libraryOptionValues, unsigned int numLibraryOptions) {
  REQUIRE_INIT();
  if (!library || !code) return CUDA_ERROR_INVALID_VALUE;
  if ((numJitOptions > 0 && (!jitOptions || !jitOptionsValues)) ||
      (numLibraryOptions > 0 && (!libraryOptions || !libraryOptionValues))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> lock(g.mu);
  auto* lib = new Library;
  g.libraries.insert(lib);
  *library = reinterpret_cast<CUlibrary>(lib);
  return CUDA_SUCCESS;
}

CUresult cuLibraryUnload(CUlibrary library) {
  REQUIRE_INIT();
  std::lock_guard<std::mutex> lock(g.mu);
  auto* lib = reinterpret_cast<Library*>(library);
  if (!g.libraries.count(lib)) return CUDA_ERROR_INVALID_HANDLE;
  for (auto& [name, k] : lib->kernels) retire_function(k);
  g.libraries.erase(lib);
  delete lib;
  return CUDA_SUCCESS;
}

CUresult cuLibraryGetKernel(CUkernel* pKernel, CUlibrary library, const char* name) {
  REQUIRE_INIT();
  if (!pKernel || !name) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  auto* lib = reinterpret_cast<Library*>(library);
  if (!g.libraries.count(lib)) return CUDA_ERROR_INVALID_HANDLE;
  Function*& k = lib->kernels[name];
  if (!k) k = new_function(name, nullptr, kKernelMagic);
  *pKernel = reinterpret_cast<CUkernel>(k);
  return CUDA_SUCCESS;
}

CUresult cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) {
  REQUIRE_INIT();
  if (!pFunc) return CUDA_ERROR_INVALID_VALUE;
  auto* k = reinterpret_cast<Function*>(kernel);
  if (!k || k->magic.load() != kKernelMagic) return CUDA_ERROR_INVALID_HANDLE;
  REQUIRE_CONTEXT(c);
  *pFunc = reinterpret_cast<CUfunction>(k);  // a kernel launches in any context
  return CUDA_SUCCESS;
}

CUresult cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction hfunc) {
  REQUIRE_INIT();
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  auto* f = reinterpret_cast<Function*>(hfunc);
  if (!f || (f->magic.load() != kFunctionMagic && f->magic.load() != kKernelMagic)) return CUDA_ERROR_INVALID_HANDLE;
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = 32; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *pi = 90; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = 90; break;
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = 232448 - 0; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = -1; break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: *pi = 1; break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: *pi = 0; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

// -- launches -------------------------------------------------------------------------------------

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                        unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                        unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra) {
  return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, false,
                kernelParams, extra);
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                             unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                             unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra) {
  return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, true,
                kernelParams, extra);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra) {
  return launch_ex(config, f, kernelParams, extra, false);
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra) {
  return launch_ex(config, f, kernelParams, extra, true);
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                   unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                   unsigned int sharedMemBytes, CUstream hStream, void** kernelParams) {
  return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, false,
                kernelParams, nullptr);
}

CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                        void** kernelParams) {
  return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, true,
                kernelParams, nullptr);
}

}  // extern "C"

// -- test hooks -----------------------------------------------------------------------------------

namespace {

Device* hook_device(int device) {  // under g.mu
  if (!g.initialized.load()) return nullptr;
  return device_at(device);
}

const ProcessRow* row_of(const SharedDevice& shared, int pid) {
  for (const auto& row : shared.rows) {
    uint64_t owner = row.owner.load(std::memory_order_acquire);
    if (owner != kNoProcess && owner != kClearing && key_pid(owner) == pid) return &row;
  }
  return nullptr;
}

}  // namespace

FAKE_CUDA_HOOK unsigned long long fake_cuda_busy_ns(int device, int pid) {
  std::lock_guard<std::mutex> lock(g.mu);
  Device* d = hook_device(device);
  if (!d) return 0;
  if (pid == 0) return d->shared->total_busy_ns.load();
  const ProcessRow* row = row_of(*d->shared, pid);
  return row ? row->busy_ns.load() : 0;
}

FAKE_CUDA_HOOK unsigned long long fake_cuda_launches(int device, int pid) {
  std::lock_guard<std::mutex> lock(g.mu);
  Device* d = hook_device(device);
  if (!d) return 0;
  if (pid == 0) {
    uint64_t sum = 0;
    for (const auto& row : d->shared->rows) {
      uint64_t owner = row.owner.load();
      if (owner != kNoProcess && owner != kClearing) sum += row.launches.load();
    }
    return sum;
  }
  const ProcessRow* row = row_of(*d->shared, pid);
  return row ? row->launches.load() : 0;
}

FAKE_CUDA_HOOK unsigned long long fake_cuda_used_bytes(int device) {
  std::lock_guard<std::mutex> lock(g.mu);
  Device* d = hook_device(device);
  if (!d) return 0;
  sweep(*d->shared, g.self);
  return used_bytes(*d->shared);
}

FAKE_CUDA_HOOK unsigned long long fake_cuda_process_used_bytes(int device, int pid) {
  std::lock_guard<std::mutex> lock(g.mu);
  Device* d = hook_device(device);
  if (!d) return 0;
  sweep(*d->shared, g.self);
  if (pid == 0) return used_bytes(*d->shared);
  const ProcessRow* row = row_of(*d->shared, pid);
  return row ? row->used_bytes.load() : 0;
}

FAKE_CUDA_HOOK unsigned long long fake_cuda_busy_until_ns(int device) {
  std::lock_guard<std::mutex> lock(g.mu);
  Device* d = hook_device(device);
  return d ? d->shared->busy_until_ns.load() : 0;
}

FAKE_CUDA_HOOK int fake_cuda_export_table_calls(void) { return g.export_table_calls.load(); }

// Every live process's simulated kernel time on the device `uuid` names, read straight from the
// state file (FAKE_CUDA_STATE_DIR), without cuInit: the NVML test double's process utilization
// comes from here, as the real NVML's comes from the driver.
FAKE_CUDA_HOOK int fake_cuda_process_busy(const char* uuid, int* pids, unsigned long long* busy_ns, int max) {
  static std::mutex mu;
  static std::map<std::string, SharedDevice*> opened;
  std::lock_guard<std::mutex> lock(mu);
  SharedDevice*& shared = opened[uuid];
  if (!shared) {
    const char* dir = std::getenv("FAKE_CUDA_STATE_DIR");
    DeviceConfig device;
    device.uuid_text = uuid;
    if (!parse_uuid(uuid, device.uuid)) return 0;
    std::string error;
    shared = open_shared((dir && *dir) ? dir : "/tmp/fake-cuda-" + std::to_string(getuid()), device, error);
    if (!shared) return 0;
  }
  int n = 0;
  for (const auto& row : shared->rows) {
    uint64_t owner = row.owner.load(std::memory_order_acquire);
    if (owner == kNoProcess || owner == kClearing || !process_alive(owner)) continue;
    if (n == max) break;
    pids[n] = key_pid(owner);
    busy_ns[n] = row.busy_ns.load();
    ++n;
  }
  return n;
}

FAKE_CUDA_HOOK void fake_cuda_reset_state(void) {
  std::lock_guard<std::mutex> lock(g.mu);
  reset_locked(/*owner=*/true);
}
