// NVIDIA's cuda-checkpoint utility, which moves a process's CUDA state (device memory, contexts)
// into its host memory and releases its GPUs, so that CRIU can dump the process like any other,
// and brings it back onto a GPU afterwards (driver r570+; `--device-map` from r580 for another
// GPU). Private to src/agent/runtime: JobHandle::checkpoint suspends a job's CUDA processes
// before its dump, and thaw() and a restore resume them.
//
// A process's states: running -> (lock) locked -> (checkpoint) checkpointed -> (restore) locked ->
// (unlock) running. Lock waits for the process's CUDA work in flight and then blocks its CUDA
// calls, so the process itself must not be stopped while it is locked or resumed. A process the
// utility cannot report on (`--get-state` fails) holds no CUDA context and is left alone, as CRIU's
// CUDA plugin does. Every call has a deadline: a utility that hangs is killed and the call fails.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"

namespace cnlab::agent::cuda {

// Old GPU UUID -> new GPU UUID, for a process restored onto other GPUs than it was dumped on.
using DeviceMap = std::vector<std::pair<std::string, std::string>>;

// `--get-state`: "running", "locked", "checkpointed" or "failed"; empty when the process holds no
// CUDA state (or is gone).
std::string state_of(const std::string& tool, pid_t pid, std::chrono::milliseconds timeout);

// Locks (waiting up to `timeout` for work in flight) and checkpoints every running (or only
// locked) CUDA process of `pids`, leaving those checkpointed already as they are; returns how many
// it suspended. Fails when one cannot be suspended, after resuming those it had.
Result<int> suspend(const std::string& tool, const std::vector<pid_t>& pids, std::chrono::milliseconds timeout);

// Restores (onto `map`'s GPUs where it names any) and unlocks every CUDA process of `pids` that is
// checkpointed, and unlocks those only locked; returns how many. Fails on the first that cannot be
// resumed (its CUDA calls would block for good).
Result<int> resume(const std::string& tool, const std::vector<pid_t>& pids, const DeviceMap& map,
                   std::chrono::milliseconds timeout);

// False when the process cannot hold a CUDA context: it is gone, or it started with
// CUDA_VISIBLE_DEVICES set and empty (CNLab's agent gives a job without GPUs that), so CUDA shows
// it no device. Read from /proc, so that such processes cost no call of the utility (each call
// loads the driver: tenths of a second).
bool may_hold_context(pid_t pid);

// Whether `tool` can suspend CUDA state here. NVIDIA's utility is taken as it is (its presence was
// always the test); CNLab's own (cnlab-cuda-checkpoint) is asked with `--check`, since it is
// beside every `cnlab` binary, on machines without a driver or with one older than r570 too.
Status usable(const std::string& tool, std::chrono::milliseconds timeout);

// "old=new,old=new": the utility's --device-map; empty when every GPU stays the same.
std::string device_map_argument(const DeviceMap& map);

// Where this machine's cuda-checkpoint is (NVIDIA's packages and the utility's repository put it
// in /usr/bin or /usr/local/bin); where none is, cnlab-cuda-checkpoint beside the running
// executable (/proc/self/exe: built and installed beside `cnlab`; the same command line on the
// driver's own checkpoint API, r570+), when it is there and executable; else empty.
std::string find_tool();

// `exe`'s directory's cnlab-cuda-checkpoint when that is an executable file; else empty.
std::string tool_beside(const std::string& exe);

}  // namespace cnlab::agent::cuda
