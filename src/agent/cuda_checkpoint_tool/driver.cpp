#include "agent/cuda_checkpoint_tool/driver.h"

#include <dlfcn.h>

#include <cstring>

namespace cnlab::cuda_checkpoint_tool {
namespace {

constexpr const char* kNeeded = "checkpointing CUDA state needs NVIDIA driver r570 or newer (CUDA 12.8)";

template <typename Fn>
bool find(void* library, const char* name, Fn& into) {
  into = reinterpret_cast<Fn>(::dlsym(library, name));
  return into != nullptr;
}

}  // namespace

Driver::Loaded Driver::load() {
  // Never closed: the driver stays loaded until the process exits.
  void* library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char* why = ::dlerror();
    return {nullptr, std::string("cannot load libcuda.so.1 (") + (why ? why : "unknown error") +
                         "): the NVIDIA driver is not installed, or not where the dynamic loader looks; " + kNeeded};
  }
  auto driver = std::make_unique<Driver>();
  cu::PFN_cuInit init = nullptr;
  if (!find(library, "cuInit", init)) {
    return {nullptr, std::string("libcuda.so.1 has no cuInit: it is not NVIDIA's CUDA driver library; ") + kNeeded};
  }
  find(library, "cuGetErrorName", driver->error_name_);  // optional: describe() falls back to the number
  find(library, "cuGetErrorString", driver->error_string_);
  const char* missing = !find(library, "cuCheckpointProcessGetState", driver->get_state_)     ? "cuCheckpointProcessGetState"
                        : !find(library, "cuCheckpointProcessLock", driver->lock_)             ? "cuCheckpointProcessLock"
                        : !find(library, "cuCheckpointProcessCheckpoint", driver->checkpoint_) ? "cuCheckpointProcessCheckpoint"
                        : !find(library, "cuCheckpointProcessRestore", driver->restore_)       ? "cuCheckpointProcessRestore"
                        : !find(library, "cuCheckpointProcessUnlock", driver->unlock_)         ? "cuCheckpointProcessUnlock"
                                                                                               : nullptr;
  if (missing) {
    return {nullptr, std::string("libcuda.so.1 has no ") + missing + ": this driver predates the checkpoint API; " + kNeeded};
  }
  if (const cu::CUresult r = init(0); r != cu::CUDA_SUCCESS) {
    return {nullptr, "cuInit(0) failed: " + driver->describe(r)};
  }
  return {std::move(driver), ""};
}

cu::CUresult Driver::get_state(int pid, cu::CUprocessState& state) const { return get_state_(pid, &state); }

cu::CUresult Driver::lock(int pid, unsigned timeout_ms) const {
  cu::CUcheckpointLockArgs args;
  std::memset(&args, 0, sizeof args);
  args.timeoutMs = timeout_ms;
  return lock_(pid, &args);
}

cu::CUresult Driver::checkpoint(int pid) const {
  cu::CUcheckpointCheckpointArgs args;
  std::memset(&args, 0, sizeof args);
  return checkpoint_(pid, &args);
}

cu::CUresult Driver::restore(int pid, const std::vector<GpuPair>& device_map) const {
  std::vector<cu::CUcheckpointGpuPair> pairs(device_map.size());
  for (size_t i = 0; i < device_map.size(); ++i) {
    std::memcpy(pairs[i].oldUuid.bytes, device_map[i].from.data(), sizeof pairs[i].oldUuid.bytes);
    std::memcpy(pairs[i].newUuid.bytes, device_map[i].to.data(), sizeof pairs[i].newUuid.bytes);
  }
  cu::CUcheckpointRestoreArgs args;
  std::memset(&args, 0, sizeof args);
  args.gpuPairs = pairs.empty() ? nullptr : pairs.data();
  args.gpuPairsCount = static_cast<unsigned>(pairs.size());
  return restore_(pid, &args);
}

cu::CUresult Driver::unlock(int pid) const {
  cu::CUcheckpointUnlockArgs args;
  std::memset(&args, 0, sizeof args);
  return unlock_(pid, &args);
}

std::string Driver::describe(cu::CUresult result) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (!error_name_ || error_name_(result, &name) != cu::CUDA_SUCCESS) name = nullptr;
  if (!error_string_ || error_string_(result, &text) != cu::CUDA_SUCCESS) text = nullptr;
  std::string out = name ? name : "CUresult " + std::to_string(result);
  if (text) out += std::string(" (") + text + ")";
  return out;
}

}  // namespace cnlab::cuda_checkpoint_tool
