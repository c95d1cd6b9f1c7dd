// The few declarations of the CUDA driver API (cuda.h, CUDA 12.8+) that cnlab-cuda-checkpoint
// calls, written out here so that it builds where the CUDA headers are absent. The layouts are
// cuda.h's exactly (the static_asserts below; tests/agent/cuda_checkpoint_tool_driver_test.cpp also
// compares every size, offset and constant with the real cuda.h where it is installed). They live
// in a namespace of their own, so that they never meet cuda.h's in one translation unit.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cnlab::cuda_checkpoint_tool::cu {

// cudaError_enum: an int-sized enum; only the values this tool names.
using CUresult = int;
constexpr CUresult CUDA_SUCCESS = 0;

using cuuint64_t = uint64_t;

struct CUuuid {
  char bytes[16];
};

// CUprocessState_enum.
enum CUprocessState {
  CU_PROCESS_STATE_RUNNING = 0,
  CU_PROCESS_STATE_LOCKED = 1,
  CU_PROCESS_STATE_CHECKPOINTED = 2,
  CU_PROCESS_STATE_FAILED = 3,
};

struct CUcheckpointLockArgs {
  unsigned int timeoutMs;  // 0: no timeout
  unsigned int reserved0;  // must be zero
  cuuint64_t reserved1[7];
};

struct CUcheckpointCheckpointArgs {
  cuuint64_t reserved[8];
};

struct CUcheckpointGpuPair {
  CUuuid oldUuid;
  CUuuid newUuid;
};

struct CUcheckpointRestoreArgs {
  CUcheckpointGpuPair* gpuPairs;
  unsigned int gpuPairsCount;
  char reserved[52 - sizeof(CUcheckpointGpuPair*)];
  cuuint64_t reserved1;
};

struct CUcheckpointUnlockArgs {
  cuuint64_t reserved[8];
};

static_assert(sizeof(CUprocessState) == 4);
static_assert(sizeof(CUuuid) == 16);
static_assert(sizeof(CUcheckpointLockArgs) == 64);
static_assert(offsetof(CUcheckpointLockArgs, reserved1) == 8);
static_assert(sizeof(CUcheckpointCheckpointArgs) == 64);
static_assert(sizeof(CUcheckpointGpuPair) == 32);
static_assert(offsetof(CUcheckpointGpuPair, newUuid) == 16);
#if defined(__x86_64__) || defined(__aarch64__)
static_assert(sizeof(CUcheckpointRestoreArgs) == 64);
static_assert(offsetof(CUcheckpointRestoreArgs, gpuPairsCount) == 8);
static_assert(offsetof(CUcheckpointRestoreArgs, reserved1) == 56);
#endif
static_assert(sizeof(CUcheckpointUnlockArgs) == 64);

// The functions' types (CUDAAPI is empty on Linux), looked up with dlsym by these names.
using PFN_cuInit = CUresult (*)(unsigned int flags);
using PFN_cuGetErrorName = CUresult (*)(CUresult error, const char** name);
using PFN_cuGetErrorString = CUresult (*)(CUresult error, const char** text);
using PFN_cuCheckpointProcessGetState = CUresult (*)(int pid, CUprocessState* state);
using PFN_cuCheckpointProcessLock = CUresult (*)(int pid, CUcheckpointLockArgs* args);
using PFN_cuCheckpointProcessCheckpoint = CUresult (*)(int pid, CUcheckpointCheckpointArgs* args);
using PFN_cuCheckpointProcessRestore = CUresult (*)(int pid, CUcheckpointRestoreArgs* args);
using PFN_cuCheckpointProcessUnlock = CUresult (*)(int pid, CUcheckpointUnlockArgs* args);

}  // namespace cnlab::cuda_checkpoint_tool::cu
