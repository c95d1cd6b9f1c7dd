// Kernel launches and copies: counted for the tenant's activity, and launches paced when the share
// controller (share_control.h) has set a launch interval for the tenant on that GPU. Synchronize
// calls: the time spent in them, the tenant's sign that it wants more of the GPU.
//
// The common path is a handful of instructions: whether the library is attached (one load), the
// GPU (known without a driver call when the process sees one device), one relaxed increment of this
// process's own counter, and one relaxed load of the pacing interval. No lock, no system call.
// Pacing is GCRA (the generic cell rate algorithm): the tenant's processes share one "next launch
// due" time per GPU; each launch takes the next slot with one compare-exchange, and waits only when
// its slot lies more than the burst tolerance ahead.
#include <time.h>

#include "vgpu/hooks.h"
#include "vgpu/library.h"

using namespace cnlab::vgpu;
using cu::CUresult;

namespace {

constexpr uint64_t kBurstNs = 2'000'000;  // launches may run this far ahead of their pace

void pace(int gpu, uint64_t interval) {
  Library& l = lib();
  auto& next = l.tenant->next_launch_ns[gpu];
  uint64_t now = now_ns();
  uint64_t due = next.load(std::memory_order_relaxed);
  uint64_t slot;
  do {
    slot = due > now ? due : now;
  } while (!next.compare_exchange_weak(due, slot + interval, std::memory_order_relaxed));
  if (slot <= now + kBurstNs) return;
  uint64_t wait = slot - kBurstNs - now;
  timespec ts{static_cast<time_t>(wait / 1000000000ull), static_cast<long>(wait % 1000000000ull)};
  while (::nanosleep(&ts, &ts) != 0) {
  }
  l.tenant->paced_ns[gpu].fetch_add(wait, std::memory_order_relaxed);
}

// The launch path's bookkeeping; returns nothing the caller must act on.
inline void on_launch() {
  int gpu = current_gpu();
  if (gpu < 0) return;
  count_launch(gpu);
  uint64_t interval = lib().limits->launch_interval_ns[gpu].load(std::memory_order_relaxed);
  if (__builtin_expect(interval != 0, 0)) pace(gpu, interval);
}

inline void on_copy() {
  int gpu = current_gpu();
  if (gpu >= 0) count_copy(gpu);
}

}  // namespace

// A synchronisation: how long the thread waited for the GPU is the tenant's demand signal.
#define CNLAB_SYNC_HOOK(abi, params, args)                                                         \
  CUresult abi params {                                                                            \
    CNLAB_VGPU_ENTER();                                                                            \
    uint64_t start = now_ns();                                                                     \
    CUresult r = lib().cuda.abi args;                                                              \
    int gpu = current_gpu();                                                                       \
    if (gpu >= 0) count_wait(gpu, now_ns() - start);                                               \
    return r;                                                                                      \
  }

#define CNLAB_LAUNCH_HOOK(abi)                                                                                   \
  CUresult abi(cu::CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,             \
               unsigned int by, unsigned int bz, unsigned int shared, cu::CUstream stream, void** params,        \
               void** extra) {                                                                                   \
    CNLAB_VGPU_ENTER();                                                                                          \
    on_launch();                                                                                                 \
    return lib().cuda.abi(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);                             \
  }
#define CNLAB_LAUNCH_EX_HOOK(abi)                                                                                \
  CUresult abi(const cu::CUlaunchConfig* config, cu::CUfunction f, void** params, void** extra) {                \
    CNLAB_VGPU_ENTER();                                                                                          \
    on_launch();                                                                                                 \
    return lib().cuda.abi(config, f, params, extra);                                                             \
  }
#define CNLAB_COOPERATIVE_HOOK(abi)                                                                              \
  CUresult abi(cu::CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,             \
               unsigned int by, unsigned int bz, unsigned int shared, cu::CUstream stream, void** params) {      \
    CNLAB_VGPU_ENTER();                                                                                          \
    on_launch();                                                                                                 \
    return lib().cuda.abi(f, gx, gy, gz, bx, by, bz, shared, stream, params);                                    \
  }
#define CNLAB_COPY_HOOK(abi, dst_type, src_type)                                                                 \
  CUresult abi(dst_type dst, src_type src, size_t bytes) {                                                       \
    CNLAB_VGPU_ENTER();                                                                                          \
    on_copy();                                                                                                   \
    return lib().cuda.abi(dst, src, bytes);                                                                      \
  }
#define CNLAB_COPY_ASYNC_HOOK(abi, dst_type, src_type)                                                           \
  CUresult abi(dst_type dst, src_type src, size_t bytes, cu::CUstream stream) {                                  \
    CNLAB_VGPU_ENTER();                                                                                          \
    on_copy();                                                                                                   \
    return lib().cuda.abi(dst, src, bytes, stream);                                                              \
  }

extern "C" {

CNLAB_SYNC_HOOK(cuCtxSynchronize, (), ())
CNLAB_SYNC_HOOK(cuCtxSynchronize_v2, (cu::CUcontext ctx), (ctx))
CNLAB_SYNC_HOOK(cuStreamSynchronize, (cu::CUstream stream), (stream))
CNLAB_SYNC_HOOK(cuStreamSynchronize_ptsz, (cu::CUstream stream), (stream))
CNLAB_SYNC_HOOK(cuEventSynchronize, (cu::CUevent event), (event))

CNLAB_LAUNCH_HOOK(cuLaunchKernel)
CNLAB_LAUNCH_HOOK(cuLaunchKernel_ptsz)
CNLAB_LAUNCH_EX_HOOK(cuLaunchKernelEx)
CNLAB_LAUNCH_EX_HOOK(cuLaunchKernelEx_ptsz)
CNLAB_COOPERATIVE_HOOK(cuLaunchCooperativeKernel)
CNLAB_COOPERATIVE_HOOK(cuLaunchCooperativeKernel_ptsz)

CNLAB_COPY_HOOK(cuMemcpy, cu::CUdeviceptr, cu::CUdeviceptr)
CNLAB_COPY_HOOK(cuMemcpy_ptds, cu::CUdeviceptr, cu::CUdeviceptr)
CNLAB_COPY_ASYNC_HOOK(cuMemcpyAsync, cu::CUdeviceptr, cu::CUdeviceptr)
CNLAB_COPY_ASYNC_HOOK(cuMemcpyAsync_ptsz, cu::CUdeviceptr, cu::CUdeviceptr)
CNLAB_COPY_HOOK(cuMemcpyHtoD_v2, cu::CUdeviceptr, const void*)
CNLAB_COPY_HOOK(cuMemcpyHtoD_v2_ptds, cu::CUdeviceptr, const void*)
CNLAB_COPY_HOOK(cuMemcpyDtoH_v2, void*, cu::CUdeviceptr)
CNLAB_COPY_HOOK(cuMemcpyDtoH_v2_ptds, void*, cu::CUdeviceptr)
CNLAB_COPY_HOOK(cuMemcpyDtoD_v2, cu::CUdeviceptr, cu::CUdeviceptr)
CNLAB_COPY_HOOK(cuMemcpyDtoD_v2_ptds, cu::CUdeviceptr, cu::CUdeviceptr)
CNLAB_COPY_ASYNC_HOOK(cuMemcpyHtoDAsync_v2, cu::CUdeviceptr, const void*)
CNLAB_COPY_ASYNC_HOOK(cuMemcpyHtoDAsync_v2_ptsz, cu::CUdeviceptr, const void*)
CNLAB_COPY_ASYNC_HOOK(cuMemcpyDtoHAsync_v2, void*, cu::CUdeviceptr)
CNLAB_COPY_ASYNC_HOOK(cuMemcpyDtoHAsync_v2_ptsz, void*, cu::CUdeviceptr)
CNLAB_COPY_ASYNC_HOOK(cuMemcpyDtoDAsync_v2, cu::CUdeviceptr, cu::CUdeviceptr)
CNLAB_COPY_ASYNC_HOOK(cuMemcpyDtoDAsync_v2_ptsz, cu::CUdeviceptr, cu::CUdeviceptr)

}  // extern "C"
