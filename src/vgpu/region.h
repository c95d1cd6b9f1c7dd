// The shared-memory layout the interception library (libcnlab-vgpu.so) and the agent share, and the
// few operations on it both sides need. This is vgpu's public face for the agent.
//
// Two kinds of file, each mapped with mmap by every process that uses it:
//  - a *limits region*, written only by the agent and mapped read-only by jobs: GPUs and, per
//    tenant (a job), its memory limit, guaranteed quota, compute share and the launch pacing the
//    share controller decided, per GPU. The agent gives each job one of its own
//    (`DIR/tenant-limits/<tenant>`), listing only that job and only its GPUs, numbered in the order
//    of its binding: a job's processes neither see the node's other jobs nor hold an index of the
//    node's, so a dump of them means the same on any node that writes its regions the same way;
//  - one *tenant region* per tenant (`DIR/tenants/<tenant>`), written by the tenant's own processes
//    (and the agent): which processes use CUDA (a slot each), what each holds on each GPU, their
//    launch and copy counters, the launch pacing state, and the IPC handles the tenant exported.
// Without an agent (standalone) there is no limits file: the tenant region carries the limits the
// environment gave (`standalone_limits`).
//
// Everything shared is a lock-free std::atomic of at most 64 bits (address-free, so valid across
// processes), laid out in fixed arrays: no pointers, no allocation, no lock on the hot path. The
// only lock is a record lock per process slot (one byte of the tenant file), held for the
// process's life: the kernel drops it when the process dies, however it dies, so a dead process is
// told from a live one without pids (which a PID namespace renumbers). It is an open file
// description lock (F_OFD_SETLK), not a POSIX one: those belong to the process and are all dropped
// when it closes *any* descriptor of the file, which CRIU's restore does (it opens the file again
// for the mapping and closes it), so a restored process lost its slot and was reaped as dead. An
// OFD lock belongs to the descriptor the library opened; a forked child closes its copy at once
// (the library's fork handler), so the lock still goes with the process that took it.
//
// A tenant's usage on a GPU is the sum of its live processes' slots. Each process only adds to and
// subtracts from its own slot, so no counter can underflow, and reaping a dead process is clearing
// its slot (the driver freed its memory when it died). See `try_charge` for why the sum cannot
// overshoot the limit under concurrency.
//
// Libc only: this file is compiled into the interception library.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace cnlab::vgpu {

inline constexpr uint32_t kLimitsMagic = 0x4c47564e;  // "NVGL"
inline constexpr uint32_t kTenantMagic = 0x5447564e;  // "NVGT"
inline constexpr uint32_t kRegionVersion = 1;

inline constexpr int kMaxGpus = 64;      // GPUs and MIG instances a node's region describes (8 x 7 MIG + 8)
inline constexpr int kMaxTenants = 128;  // tenants on a node at once (100 one-block tenants and room)
inline constexpr int kMaxProcs = 64;     // processes of one tenant using CUDA at once (a bit each)
inline constexpr int kMaxExports = 256;  // IPC exports a tenant keeps registered (oldest reused)
inline constexpr int kIdSize = 64;       // tenant id, NUL-terminated
inline constexpr int kUuidSize = 80;     // "GPU-xxxxxxxx-xxxx-..." or "MIG-...", NUL-terminated

inline constexpr uint64_t kUnlimited = ~uint64_t{0};

// One GPU (or MIG instance) as CUDA and NVML name it.
struct GpuEntry {
  std::atomic<uint32_t> state;  // 0 empty, 1 being written, 2 ready
  uint32_t node_index;          // the node's GPU index (the agent's numbering)
  char uuid[kUuidSize];
  std::atomic<uint64_t> total_bytes;  // the device's memory
};

// A tenant's limits on every GPU of the region. Written by the agent (or, standalone, once from the
// environment); read by the library on every allocation and launch.
struct TenantLimits {
  std::atomic<uint64_t> memory_limit[kMaxGpus];  // bytes it may hold now: quota + granted burst; 0 none
  std::atomic<uint64_t> memory_quota[kMaxGpus];  // the guaranteed part (what its slice promised)
  std::atomic<uint32_t> compute_share[kMaxGpus];  // percent of the GPU's compute, 1..100
  // Launch pacing the share controller set: at most one launch per this many ns on average; 0: none.
  std::atomic<uint64_t> launch_interval_ns[kMaxGpus];
  std::atomic<uint32_t> flags;  // kHardShare
};
inline constexpr uint32_t kHardShare = 1;  // hold the compute share even when the GPU is idle

struct LimitsRegion {
  uint32_t magic;
  uint32_t version;
  uint64_t size;  // sizeof(LimitsRegion)
  std::atomic<uint32_t> gpu_count;
  GpuEntry gpus[kMaxGpus];
  struct Tenant {
    std::atomic<uint32_t> state;  // 0 free, 1 being written, 2 active
    char id[kIdSize];
    TenantLimits limits;
  } tenants[kMaxTenants];
};

// One process of a tenant.
struct ProcSlot {
  std::atomic<uint32_t> state;  // 0 free, 1 claimed (its owner holds the slot's record lock)
  std::atomic<int32_t> pid;     // as the process sees itself (its PID namespace's)
  std::atomic<uint64_t> start_ticks;  // /proc/self/stat starttime: the same in every namespace
  std::atomic<int32_t> host_pid;      // filled in by the agent, which sees the host's numbering
};

// A registered IPC export: a digest of a CUipcMemHandle / CUipcEventHandle / fabric handle, or the
// (device, inode) of an exported file descriptor.
struct ExportKey {
  std::atomic<uint64_t> a;
  std::atomic<uint64_t> b;  // 0 in both: empty
};

struct TenantRegion {
  uint32_t magic;
  uint32_t version;
  uint64_t size;  // sizeof(TenantRegion)
  char id[kIdSize];
  std::atomic<uint32_t> gpu_count;
  GpuEntry gpus[kMaxGpus];
  TenantLimits standalone_limits;  // used when no limits region is given
  std::atomic<uint32_t> standalone_set;  // 0 until the tenant's first process wrote standalone_limits
  std::atomic<uint64_t> active_procs;  // bit p: procs[p] claimed
  ProcSlot procs[kMaxProcs];
  // Bytes process p holds on GPU g, [g][p] so that a GPU's sum reads contiguous memory.
  std::atomic<uint64_t> usage[kMaxGpus][kMaxProcs];
  // Activity, per process so that processes never share a counter's cache line with another's.
  std::atomic<uint64_t> launches[kMaxGpus][kMaxProcs];
  std::atomic<uint64_t> copies[kMaxGpus][kMaxProcs];
  // Time its threads spent waiting for the GPU (in synchronize calls): a tenant that waits wants
  // more of the GPU than it gets; one that does not is limited by its own demand.
  std::atomic<uint64_t> waited_ns[kMaxGpus][kMaxProcs];
  // Launch pacing (GCRA): the earliest time, CLOCK_MONOTONIC ns, the next launch is due.
  std::atomic<uint64_t> next_launch_ns[kMaxGpus];
  std::atomic<uint64_t> paced_ns[kMaxGpus];       // total time launches waited for pacing
  std::atomic<uint64_t> oom_refusals[kMaxGpus];   // allocations refused for the quota
  std::atomic<uint64_t> ipc_refusals;             // foreign IPC handles refused
  std::atomic<uint64_t> peak_usage[kMaxGpus];     // the highest sum seen by an allocating process
  std::atomic<uint32_t> export_next;
  ExportKey exports[kMaxExports];
};

// ---- Opening and creating -----------------------------------------------------------------------

// A mapped file. `fd` stays open: it holds the process's slot lock (see claim_proc_slot).
template <typename T>
struct Mapped {
  T* region = nullptr;
  int fd = -1;
  explicit operator bool() const { return region != nullptr; }
};

// Result codes of the operations below (errno-free, so the library can log them plainly).
enum class RegionError { kOk, kMissing, kIo, kBadMagic, kBadVersion, kTooSmall, kFull, kNotFound };
const char* region_error_text(RegionError e);

// Opens an existing limits region read-only (jobs) or read-write (the agent).
RegionError open_limits(const char* path, bool writable, Mapped<LimitsRegion>* out);
// Creates (or opens and checks) the limits region at `path` with `mode`; the agent's call.
RegionError create_limits(const char* path, unsigned mode, Mapped<LimitsRegion>* out);

// Opens a tenant region read-write. With `create`, creates it if absent (initialised under an
// exclusive flock, so two processes starting at once agree), with `mode` and `tenant_id`.
RegionError open_tenant(const char* path, bool create, unsigned mode, const char* tenant_id, Mapped<TenantRegion>* out);
// Opens a tenant region read-only (the IPC check reading other tenants).
RegionError open_tenant_readonly(const char* path, Mapped<TenantRegion>* out);

template <typename T>
void unmap(Mapped<T>* m);

// ---- GPUs -----------------------------------------------------------------------------------------

// The index of the GPU whose UUID matches `uuid` (compared on the hex digits after the first '-',
// case-insensitively, so "GPU-ABC..." matches "gpu-abc..."), or -1.
int find_gpu(const GpuEntry* gpus, uint32_t count, const char* uuid);
// Finds `uuid` in a tenant region's table, appending it when absent (standalone processes discover
// GPUs as they go). Returns its index, or -1 when the table is full.
int find_or_add_gpu(TenantRegion* r, const char* uuid, uint64_t total_bytes);
// Sets entry `index` of `gpus` (the agent's call, before any job maps the region).
void set_gpu(GpuEntry* gpus, std::atomic<uint32_t>* count, int index, uint32_t node_index, const char* uuid,
             uint64_t total_bytes);

// ---- Tenants in the limits region ------------------------------------------------------------------

// The tenant named `id`, or null.
LimitsRegion::Tenant* find_tenant(LimitsRegion* r, const char* id);
// Adds (or finds) tenant `id` with every limit 0 (nothing allowed until set). Null when full.
LimitsRegion::Tenant* add_tenant(LimitsRegion* r, const char* id);
// Frees tenant `id`'s entry (its job ended).
void remove_tenant(LimitsRegion* r, const char* id);

// ---- Process slots --------------------------------------------------------------------------------

// Claims a free process slot for the calling process: takes the slot's record lock on `fd` (never
// blocking), then marks it claimed, clearing what a dead predecessor left. Returns the slot's index,
// or -1 when all are held by live processes.
int claim_proc_slot(TenantRegion* r, int fd, int32_t pid, uint64_t start_ticks);
// The calling process gives its slot back (at exit): usage cleared, lock released.
void release_proc_slot(TenantRegion* r, int fd, int slot);
// Clears the slots of processes that died (their record lock is free while the slot is claimed).
// Returns how many were reaped. Safe to call from any process that has the region open on `fd`;
// a process holding a slot passes it as `own_slot` (-1 for none).
int reap_dead_procs(TenantRegion* r, int fd, int own_slot);
// Whether slot `slot` belongs to a live process (its record lock is held through another open file
// than `fd`'s).
bool proc_alive(int fd, int slot);
// Takes the tenant's controller lock (one more record lock byte) without blocking: true when this
// process holds it now. Released when the process dies.
bool try_lock_controller(int fd);

// ---- Memory accounting ----------------------------------------------------------------------------

// What tenant region `r` holds on GPU `gpu`: the sum over its claimed slots.
uint64_t tenant_usage(const TenantRegion* r, int gpu);

// Adds `bytes` to slot `slot` on `gpu` if the tenant's sum stays within `limit`. Lock-free and exact:
// each allocating process adds first and then re-reads the sum (all sequentially consistent), so of
// two processes racing for the last bytes the later adder always sees both additions and backs out.
// Both may back out; the caller then retries (see the library's charge path). Never overshoots.
bool try_charge(TenantRegion* r, int gpu, int slot, uint64_t bytes, uint64_t limit);
// Subtracts what this slot added before; saturates at zero rather than wrap.
void uncharge(TenantRegion* r, int gpu, int slot, uint64_t bytes);

// ---- IPC exports ----------------------------------------------------------------------------------

// A 128-bit digest of `size` bytes (FNV-1a based, two lanes; not cryptographic: it names handles a
// tenant itself registered, so a collision can only refuse, never admit, a foreign handle unless
// the foreign tenant's own table also lacks it).
void digest_bytes(const void* data, size_t size, uint64_t* a, uint64_t* b);
// Registers an export in the tenant's table (oldest entry reused when full).
void add_export(TenantRegion* r, uint64_t a, uint64_t b);
bool has_export(const TenantRegion* r, uint64_t a, uint64_t b);

}  // namespace cnlab::vgpu
