// cnlab-cuda-checkpoint's driver calls: libcuda.so.1 dlopen'd at run time (never linked, so that
// the tool starts, and says why it cannot work, where no driver is installed), cuInit(0) (which a
// restore needs in the calling process unless persistence mode is on), and the five checkpoint
// functions of CUDA 12.8 / driver r570, found with dlsym.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "agent/cuda_checkpoint_tool/command_line.h"
#include "agent/cuda_checkpoint_tool/driver_api.h"

namespace cnlab::cuda_checkpoint_tool {

class Driver {
 public:
  struct Loaded;
  // Loads libcuda.so.1 (the dynamic loader's search: LD_LIBRARY_PATH, then the system's), finds
  // the checkpoint API and calls cuInit(0). On failure `error` says which of these failed and that
  // driver r570 or newer is needed.
  static Loaded load();

  // Each returns the driver's CUresult (cu::CUDA_SUCCESS when done).
  cu::CUresult get_state(int pid, cu::CUprocessState& state) const;
  cu::CUresult lock(int pid, unsigned timeout_ms) const;
  cu::CUresult checkpoint(int pid) const;
  cu::CUresult restore(int pid, const std::vector<GpuPair>& device_map) const;
  cu::CUresult unlock(int pid) const;

  // "CUDA_ERROR_ILLEGAL_STATE (the operation cannot be performed in the present state)", from
  // cuGetErrorName and cuGetErrorString; "CUresult 123" where the driver knows no name for it.
  std::string describe(cu::CUresult result) const;

 private:
  cu::PFN_cuGetErrorName error_name_ = nullptr;
  cu::PFN_cuGetErrorString error_string_ = nullptr;
  cu::PFN_cuCheckpointProcessGetState get_state_ = nullptr;
  cu::PFN_cuCheckpointProcessLock lock_ = nullptr;
  cu::PFN_cuCheckpointProcessCheckpoint checkpoint_ = nullptr;
  cu::PFN_cuCheckpointProcessRestore restore_ = nullptr;
  cu::PFN_cuCheckpointProcessUnlock unlock_ = nullptr;
};

struct Driver::Loaded {
  std::unique_ptr<Driver> driver;  // null on failure
  std::string error;
};

}  // namespace cnlab::cuda_checkpoint_tool
