// Part of the TEST DOUBLE of libcuda.so.1 (see fake_cuda.cpp for the model): its configuration and
// the state that every process using the fake shares, one memory-mapped file per device UUID.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>
#include <vector>

// The fake is compiled with __CUDA_API_VERSION_INTERNAL (see tests/fakes/CMakeLists.txt), so that
// cuda.h declares every ABI name (legacy v1, _v2, _ptsz, _ptds) instead of mapping the plain ones.
#ifndef __CUDA_API_VERSION_INTERNAL
#error "fake_cuda is built with -D__CUDA_API_VERSION_INTERNAL"
#endif
#include <cuda.h>

namespace cnlab::fake_cuda {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;
constexpr uint64_t kGranularity = 2 * kMiB;  // VMM granularity, and what allocations are counted in
constexpr uint64_t kArrayAlignment = 64 * kKiB;

inline constexpr uint64_t round_up(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

// -- configuration ------------------------------------------------------------------------------

struct DeviceConfig {
  std::string name = "NVIDIA H100 80GB HBM3";
  std::string uuid_text;  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  CUuuid uuid{};
  uint64_t total_bytes = 81559 * kMiB;
  int sms = 132;
  int cc_major = 9;
  int cc_minor = 0;
  std::string pci_bus_id;  // "0000:01:00.0"
};

struct Config {
  std::vector<DeviceConfig> devices;
  std::string state_dir;
  uint64_t alloc_delay_us = 0;
  uint64_t kernel_ns = 10'000;
};

// Reads FAKE_CUDA_CONFIG, FAKE_CUDA_STATE_DIR, FAKE_CUDA_ALLOC_DELAY_US and FAKE_CUDA_KERNEL_US.
// On a bad line or value prints what was wrong (file, line, value) to stderr and returns
// CUDA_ERROR_INVALID_VALUE; a file without device lines gives CUDA_ERROR_NO_DEVICE.
CUresult load_config(Config& out);

bool parse_uuid(std::string_view text, CUuuid& out);
std::string format_uuid(const CUuuid& uuid);

// -- clock ----------------------------------------------------------------------------------------

inline uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // the vDSO: no system call
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Sleeps (clock_nanosleep, never a spin) until CLOCK_MONOTONIC reaches `t`.
void sleep_until_ns(uint64_t t);
void sleep_for_us(uint64_t us);

inline void atomic_max(std::atomic<uint64_t>& a, uint64_t v) {
  uint64_t cur = a.load(std::memory_order_relaxed);
  while (cur < v && !a.compare_exchange_weak(cur, v, std::memory_order_acq_rel, std::memory_order_relaxed)) {
  }
}

// -- processes ------------------------------------------------------------------------------------

// A process is named by its pid and its start time (clock ticks since boot, /proc/<pid>/stat field
// 22), packed into one word so that a row changes owner with a single compare-and-swap:
// (start_time << 22) | pid. A reused pid has another start time, so it is never confused.
using ProcessKey = uint64_t;
constexpr ProcessKey kNoProcess = 0;
constexpr ProcessKey kClearing = ~0ull;  // a dead process's row being emptied
constexpr int kPidBits = 22;
inline int key_pid(ProcessKey k) { return static_cast<int>(k & ((1ull << kPidBits) - 1)); }

ProcessKey self_key();  // reads /proc/self/stat (cached per pid)
// False once the process has exited (no /proc entry, another start time, or a zombie).
bool process_alive(ProcessKey key);

// -- the shared state file ------------------------------------------------------------------------

constexpr int kMaxProcesses = 256;
constexpr int kMaxIpcEvents = 4096;
constexpr uint64_t kStateMagic = 0x31445543454B4146ull;  // "FAKECUD1" as little-endian text
constexpr uint32_t kStateLayout = 1;

struct alignas(64) ProcessRow {
  std::atomic<uint64_t> owner;       // ProcessKey; kNoProcess when free
  std::atomic<uint64_t> used_bytes;  // device memory the process holds (counted sizes)
  std::atomic<uint64_t> busy_ns;     // simulated kernel time the process queued on the device
  std::atomic<uint64_t> launches;
};

struct IpcEventSlot {
  std::atomic<uint64_t> owner;       // ProcessKey of the exporting process; kNoProcess when free
  std::atomic<uint64_t> generation;  // bumped at every claim, so a stale handle is recognised
  std::atomic<uint64_t> done_ns;     // completion time of the last record; 0: never recorded
  uint64_t reserved;
};

struct SharedDevice {
  uint64_t magic;
  uint32_t layout;
  uint32_t size;
  char uuid[48];
  uint64_t total_bytes;  // as configured by the process that created the file (informational)
  alignas(64) std::atomic<uint64_t> busy_until_ns;  // the device timeline: when queued work ends
  alignas(64) std::atomic<uint64_t> total_busy_ns;  // every process's kernels, dead ones included
  std::atomic<uint64_t> total_launches;
  alignas(64) ProcessRow rows[kMaxProcesses];
  IpcEventSlot events[kMaxIpcEvents];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory atomics must be lock-free");

// Opens (or creates, race-free: built under a temporary name and link()ed into place) the state
// file of `device` in `dir`. Returns nullptr with `error` set on failure.
SharedDevice* open_shared(const std::string& dir, const DeviceConfig& device, std::string& error);
void close_shared(SharedDevice* shared);

// Claims a row for `self` (sweeping dead processes when the table is full); nullptr when full.
ProcessRow* claim_row(SharedDevice& shared, ProcessKey self);
// Empties the row (this process is done with the device).
void release_row(ProcessRow& row);
// Clears the rows (and IPC event slots) of processes that have exited.
void sweep(SharedDevice& shared, ProcessKey self);
// Device memory in use: the sum over rows (call sweep first for live processes only).
uint64_t used_bytes(const SharedDevice& shared);
// Adds `bytes` to `row` unless the device would then hold more than `total` (after a sweep of dead
// processes); false: out of memory. Exact across processes: two racing for the last bytes may
// both be refused, never both admitted.
bool charge(SharedDevice& shared, ProcessRow& row, ProcessKey self, uint64_t total, uint64_t bytes);
void uncharge(ProcessRow& row, uint64_t bytes);

// IPC event slots: claim (-1 when none is free), release.
int claim_event_slot(SharedDevice& shared, ProcessKey self);
void release_event_slot(SharedDevice& shared, int index);

}  // namespace cnlab::fake_cuda
