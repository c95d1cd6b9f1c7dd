// Part of the TEST DOUBLE of libcuda.so.1 (see fake_cuda.cpp for the model): the process-local
// objects behind the handles, shared by fake_cuda.cpp, fake_cuda_memory.cpp and fake_cuda_proc.cpp.
#pragma once

#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "fake_cuda_state.h"

// Extra C functions for tests (found with dlsym): default visibility, the rest of the fake hidden.
#define FAKE_CUDA_HOOK extern "C" __attribute__((visibility("default")))

namespace cnlab::fake_cuda {

// Handles are pointers to these objects; the magic tells a live object from a stale handle.
enum Magic : uint32_t {
  kDeadMagic = 0,
  kContextMagic = 0xC0C7C0C7,
  kStreamMagic = 0x57AEA300,
  kEventMagic = 0xE7E7E7E7,
  kModuleMagic = 0x30D01E00,
  kFunctionMagic = 0xF0C7F0C7,
  kKernelMagic = 0x4E4E4E4E,  // a CUkernel: launchable as a CUfunction too
  kLibraryMagic = 0x11B1A100,
  kArrayMagic = 0xA77A7A00,
  kMipmapMagic = 0x313A3A00,
  kPoolMagic = 0x9001F001,
  kVmmMagic = 0x7331AA00,
};

struct Context;
struct Device;
struct Pool;

struct Stream {
  std::atomic<uint32_t> magic{kDeadMagic};
  Context* ctx = nullptr;
  unsigned flags = 0;
  int priority = 0;
  bool legacy = false;    // the context's NULL stream (CU_STREAM_LEGACY)
  bool blocking = true;   // synchronises with the legacy stream (not CU_STREAM_NON_BLOCKING)
  std::atomic<uint64_t> last_end{0};  // completion time (CLOCK_MONOTONIC ns) of its work so far
};

struct Event {
  std::atomic<uint32_t> magic{kDeadMagic};
  Context* ctx = nullptr;
  unsigned flags = 0;
  std::atomic<uint64_t> local_done{0};
  std::atomic<uint64_t>* done = &local_done;  // 0: never recorded; else its completion time
  // Interprocess events keep `done` in the device's state file.
  SharedDevice* shared = nullptr;
  int slot = -1;
  uint64_t generation = 0;
  bool imported = false;
};

struct Function {
  std::atomic<uint32_t> magic{kDeadMagic};
  uint64_t duration_ns = 0;
  std::string name;
  Context* ctx = nullptr;  // nullptr for a library's kernel
};

struct Module {
  uint32_t magic = kModuleMagic;
  Context* ctx = nullptr;
  std::map<std::string, Function*> functions;
};

struct Library {
  uint32_t magic = kLibraryMagic;
  std::map<std::string, Function*> kernels;
};

struct Array {
  uint32_t magic = kArrayMagic;
  Context* ctx = nullptr;
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  bool three_d = false;
  uint64_t counted = 0;
};

struct MipmappedArray {
  uint32_t magic = kMipmapMagic;
  Context* ctx = nullptr;
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  unsigned levels = 0;
  uint64_t counted = 0;
};

struct Context {
  std::atomic<uint32_t> magic{kContextMagic};  // stays: a destroyed context is recognised as such
  Device* device = nullptr;
  bool primary = false;
  std::atomic<bool> alive{false};
  std::atomic<uint64_t> epoch{0};  // changes at every activation and destruction
  unsigned flags = 0;
  int primary_refs = 0;
  Stream legacy;
  std::atomic<uint64_t> blocking_end{0};  // completion of work in blocking streams (legacy included)
  std::atomic<uint64_t> all_end{0};       // completion of all work in the context
  std::vector<Stream*> streams;           // created with cuStreamCreate*, and per-thread streams
  std::set<Event*> events;
  std::set<Module*> modules;
  std::set<Array*> arrays;
  std::set<MipmappedArray*> mipmaps;
};

struct Device {
  int ordinal = 0;
  DeviceConfig cfg;
  SharedDevice* shared = nullptr;
  ProcessRow* row = nullptr;
  std::unique_ptr<Context> primary;
  Pool* default_pool = nullptr;
  Pool* current_pool = nullptr;
  std::atomic<bool> pools_dirty{false};  // a pool chunk was freed since the last release
};

// A device address range this process can address: device memory it allocated, a pool chunk, a
// mapping of another process's memory (IPC) or a VMM mapping.
struct VmmHandle;
struct Block {
  enum Kind { kAlloc, kManaged, kPoolChunk, kIpc, kVmm } kind = kAlloc;
  uintptr_t base = 0;
  size_t size = 0;    // bytes addressable
  size_t mapped = 0;  // bytes mmap'd at base
  int fd = -1;        // memfd (kAlloc, kManaged, kPoolChunk)
  uint64_t id = 0;
  Device* device = nullptr;
  Context* ctx = nullptr;  // kAlloc, kManaged, kIpc
  uint64_t counted = 0;    // bytes charged to the device for it
  // kPoolChunk
  Pool* pool = nullptr;
  bool in_use = false;
  size_t user_size = 0;
  // kIpc
  int ipc_refs = 0;
  ProcessKey ipc_owner = 0;
  uint64_t ipc_id = 0;
  // kVmm
  VmmHandle* handle = nullptr;
  size_t handle_offset = 0;
  std::vector<uint8_t> prot;  // per 2 MiB granule: PROT_* of the mapping
};

struct Pool {
  uint32_t magic = kPoolMagic;
  Device* device = nullptr;
  bool is_default = false;
  bool destroyed = false;
  CUmemPoolProps props{};
  uint64_t release_threshold = 0;
  int reuse[3] = {1, 1, 1};  // CU_MEMPOOL_ATTR_REUSE_* (1..3)
  uint64_t reserved = 0, reserved_high = 0, used = 0, used_high = 0;
  std::vector<Block*> chunks;  // in reservation order
};

struct VmmHandle {
  uint32_t magic = kVmmMagic;
  Device* device = nullptr;
  size_t size = 0;
  int fd = -1;
  uint64_t id = 0;
  CUmemAllocationProp prop{};
  int refs = 1;  // cuMemCreate/cuMemImportFromShareableHandle/cuMemRetainAllocationHandle minus cuMemRelease
  int maps = 0;  // cuMemMap minus cuMemUnmap
  uint64_t counted = 0;
};

struct Driver {
  std::mutex mu;
  std::atomic<bool> initialized{false};
  std::atomic<uint64_t> generation{1};  // changes at fake_cuda_reset_state and in a forked child
  bool init_attempted = false;
  CUresult init_result = CUDA_SUCCESS;
  Config config;
  ProcessKey self = 0;
  std::vector<std::unique_ptr<Device>> devices;
  std::map<uintptr_t, Block*> blocks;                 // by base address
  std::map<uintptr_t, size_t> reservations;           // VMM address reservations: base -> size
  std::set<VmmHandle*> vmm_handles;
  std::set<Pool*> pools;
  std::set<Library*> libraries;
  std::set<Module*> modules;
  std::set<Array*> arrays;
  std::set<MipmappedArray*> mipmaps;
  std::vector<std::unique_ptr<Context>> contexts;     // cuCtxCreate'd; kept after destruction
  std::vector<std::unique_ptr<Device>> old_devices;   // from before a reset (stale handles stay readable)
  std::vector<Stream*> free_streams;                  // retired objects, reused (never freed)
  std::vector<Event*> free_events;
  std::vector<Module*> dead_modules;                  // kept, so that stale handles stay readable
  std::vector<Function*> dead_functions;
  uint64_t next_id = 1;
  std::atomic<int> export_table_calls{0};
};

// Never destroyed: a thread (or an interception library's destructor) may call the fake while the
// process exits, and everything stays reachable for leak checkers.
extern Driver& g;

// -- helpers (fake_cuda.cpp) ------------------------------------------------------------------------

inline bool initialized() { return g.initialized.load(std::memory_order_acquire); }

#define REQUIRE_INIT()                                     \
  do {                                                     \
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED; \
  } while (0)

// Declares `Context* ctx`, the calling thread's usable current context, or returns the error.
#define REQUIRE_CONTEXT(ctx)                   \
  CUresult ctx##_error = CUDA_SUCCESS;         \
  Context* ctx = usable_context(&ctx##_error); \
  if (!ctx) return ctx##_error

// The calling thread's current context (top of its stack), or nullptr.
Context* current_context();
// The current context if it is usable; else nullptr and `*error` says why (INVALID_CONTEXT when
// there is none, CONTEXT_IS_DESTROYED when it was destroyed).
Context* usable_context(CUresult* error);
Device* device_at(CUdevice ordinal);  // under g.mu or after init; nullptr when out of range
Device* device_by_uuid(const CUuuid& uuid);

// The stream a handle names for the calling thread: NULL is the legacy stream, or the per-thread
// stream when `per_thread` (the _ptsz/_ptds entry points). nullptr with `*error` set when invalid.
Stream* resolve_stream(CUstream handle, bool per_thread, CUresult* error);
// Completion time of the work a synchronisation of `s` waits for.
uint64_t stream_done(const Stream& s);
// Records that work ending at `end` was queued on `s`.
void note_work(Stream& s, uint64_t end);

// Pools whose reserved memory exceeds their release threshold release free chunks (at a
// synchronisation, like the real driver). Takes g.mu.
void release_pools_at_sync(Device& device);

// -- memory (fake_cuda_memory.cpp) ------------------------------------------------------------------

// The block that contains [p, p + n), or nullptr. Under g.mu.
Block* find_block(uintptr_t p, size_t n);
// Frees what a context owns in memory (allocations, IPC mappings). Under g.mu.
void free_context_memory(Context& ctx);
// Drops every allocation, pool, reservation and handle (fake_cuda_reset_state, fork). Under g.mu.
// `owner`: this process made them (false in a forked child, which only forgets them).
void free_all_memory(bool owner);
// Frees an array's or mipmapped array's counted memory. Under g.mu.
void free_array_memory(Device& device, uint64_t counted);
void destroy_pool_memory(Pool& pool, bool owner);

}  // namespace cnlab::fake_cuda
