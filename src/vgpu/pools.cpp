// Stream-ordered allocation (cuMemAllocAsync, cuMemAllocFromPoolAsync, cuMemFreeAsync) and pools.
//
// A pool keeps freed memory reserved for reuse and gives it back to the device only past its release
// threshold at a synchronisation, or when trimmed; what a tenant holds on the device is therefore the
// pool's *reserved* memory, not the sum of its live allocations. So a pool is charged what it
// reserves: before an allocation that may make it grow, the growth (the part of the request its free
// reserved memory cannot hold, rounded up to the pool's 2 MiB chunk) is charged within the limit;
// afterwards the charge is settled to what the pool actually reserves. Memory a pool gives back at a
// synchronisation is uncharged the next time the pool is looked at: at its next allocation, a trim,
// a cuMemGetInfo, or before any allocation of the tenant is refused. Until then the count is high,
// never low.
#include <pthread.h>

#include "vgpu/hooks.h"
#include "vgpu/library.h"

using namespace cnlab::vgpu;
using cu::CUresult;

namespace {

constexpr uint64_t kPoolChunk = uint64_t{2} << 20;
constexpr int kMaxPools = 64;

// The pools this process allocated from. A slot is claimed once (handle published last) and never
// moves, so the allocation path finds its pool without a lock; only settling takes the mutex, so two
// threads never settle one pool at once.
struct Pool {
  std::atomic<cu::CUmemoryPool> handle{nullptr};
  std::atomic<int> gpu{-1};
  uint64_t charged = 0;  // under g_settle
};
Pool g_pools[kMaxPools];
// Recursive: a refused charge settles every pool (library.cpp), also from inside a pool's settling.
pthread_mutex_t g_settle = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

Pool* find_pool(cu::CUmemoryPool handle) {
  for (Pool& p : g_pools) {
    if (p.handle.load(std::memory_order_acquire) == handle) return &p;
  }
  return nullptr;
}

Pool* pool_for(cu::CUmemoryPool handle, int gpu) {
  Pool* known = find_pool(handle);
  if (known && known->gpu.load() >= 0) return known;
  pthread_mutex_lock(&g_settle);
  Pool* found = find_pool(handle);
  if (found && found->gpu.load() < 0) {  // a destroyed pool's slot, its address reused by a new pool
    found->charged = 0;
    found->gpu.store(gpu);
  }
  for (Pool& p : g_pools) {
    if (found) break;
    if (p.handle.load() == nullptr) {
      p.gpu.store(gpu);
      p.charged = 0;
      p.handle.store(handle, std::memory_order_release);
      found = &p;
    }
  }
  pthread_mutex_unlock(&g_settle);
  return found;  // null past kMaxPools: such a pool's allocations are charged one by one instead
}

uint64_t pool_attribute(cu::CUmemoryPool pool, cu::CUmemPool_attribute attr) {
  cu::cuuint64_t value = 0;
  if (!lib().cuda.cuMemPoolGetAttribute || lib().cuda.cuMemPoolGetAttribute(pool, attr, &value) != cu::CUDA_SUCCESS) return 0;
  return value;
}

// Brings the pool's charge to what it reserves now. Call with g_settle held.
void settle_locked(Pool& p) {
  cu::CUmemoryPool handle = p.handle.load();
  int gpu = p.gpu.load();
  if (!handle || gpu < 0) return;
  uint64_t reserved = pool_attribute(handle, cu::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
  if (reserved > p.charged) charge_anyway(gpu, reserved - p.charged);
  else if (reserved < p.charged) uncharge(gpu, p.charged - reserved);
  p.charged = reserved;
}

// The device a stream's work runs on: the stream's own (CUDA 12.8+), else the current context's.
int gpu_of_stream(cu::CUstream stream) {
  Library& l = lib();
  cu::CUdevice device = 0;
  if (l.cuda.cuStreamGetDevice && l.cuda.cuStreamGetDevice(stream, &device) == cu::CUDA_SUCCESS) return gpu_of_device(device);
  return current_gpu();
}

template <typename Call>
CUresult pooled_alloc(const char* name, cu::CUdeviceptr* dptr, size_t bytes, cu::CUmemoryPool pool, int gpu, Call call) {
  if (gpu == -2) {
    if (should_log(lib().oom_logged)) log_line(LogLevel::kError, "refused %s: the stream's device is not one of the tenant's GPUs", name);
    return cu::CUDA_ERROR_OUT_OF_MEMORY;
  }
  Pool* p = pool && gpu >= 0 ? pool_for(pool, gpu) : nullptr;
  if (!p) {
    // No pool to follow (or no device to charge): charge the allocation itself.
    if (gpu < 0) return call();
    if (!charge(gpu, bytes, name)) return cu::CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = call();
    if (r != cu::CUDA_SUCCESS) uncharge(gpu, bytes);
    else lib().allocations.insert(AllocKind::kDevicePtr, *dptr, {bytes, gpu});
    return r;
  }
  pthread_mutex_lock(&g_settle);
  settle_locked(*p);
  uint64_t used = pool_attribute(pool, cu::CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
  uint64_t growth = used + bytes > p->charged ? used + bytes - p->charged : 0;
  growth = (growth + kPoolChunk - 1) / kPoolChunk * kPoolChunk;
  bool allowed = growth == 0 || charge(gpu, growth, name);
  if (allowed) p->charged += growth;
  pthread_mutex_unlock(&g_settle);
  if (!allowed) return cu::CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = call();
  pthread_mutex_lock(&g_settle);
  settle_locked(*p);  // what the pool really reserved (the growth back off if the call failed)
  pthread_mutex_unlock(&g_settle);
  return r;
}

// The pool cuMemAllocAsync draws from: the current pool of the stream's device.
cu::CUmemoryPool current_pool_of(cu::CUstream stream) {
  Library& l = lib();
  cu::CUdevice device = 0;
  bool have = (l.cuda.cuStreamGetDevice && l.cuda.cuStreamGetDevice(stream, &device) == cu::CUDA_SUCCESS) ||
              l.cuda.cuCtxGetDevice(&device) == cu::CUDA_SUCCESS;
  cu::CUmemoryPool pool = nullptr;
  if (have && l.cuda.cuDeviceGetMemPool) l.cuda.cuDeviceGetMemPool(&pool, device);
  return pool;
}

template <typename Free>
CUresult pooled_free(cu::CUdeviceptr dptr, Free call) {
  // Pool allocations are charged through their pool; only those charged one by one are recorded.
  AllocInfo info;
  bool known = lib().allocations.remove(AllocKind::kDevicePtr, dptr, &info);
  CUresult r = call();
  if (known) {
    if (r == cu::CUDA_SUCCESS) uncharge(info.gpu, info.bytes);
    else lib().allocations.insert(AllocKind::kDevicePtr, dptr, info);
  }
  return r;
}

}  // namespace

namespace cnlab::vgpu {

void settle_all_pools() {
  pthread_mutex_lock(&g_settle);
  for (Pool& p : g_pools) {
    if (p.handle.load()) settle_locked(p);
  }
  pthread_mutex_unlock(&g_settle);
}

}  // namespace cnlab::vgpu

extern "C" {

CUresult cuMemAllocAsync(cu::CUdeviceptr* dptr, size_t bytes, cu::CUstream stream) {
  CNLAB_VGPU_ENTER();
  if (!dptr) return lib().cuda.cuMemAllocAsync(dptr, bytes, stream);
  return pooled_alloc("cuMemAllocAsync", dptr, bytes, current_pool_of(stream), gpu_of_stream(stream),
                      [&] { return lib().cuda.cuMemAllocAsync(dptr, bytes, stream); });
}

CUresult cuMemAllocAsync_ptsz(cu::CUdeviceptr* dptr, size_t bytes, cu::CUstream stream) {
  CNLAB_VGPU_ENTER();
  if (!dptr) return lib().cuda.cuMemAllocAsync_ptsz(dptr, bytes, stream);
  return pooled_alloc("cuMemAllocAsync", dptr, bytes, current_pool_of(stream), gpu_of_stream(stream),
                      [&] { return lib().cuda.cuMemAllocAsync_ptsz(dptr, bytes, stream); });
}

CUresult cuMemAllocFromPoolAsync(cu::CUdeviceptr* dptr, size_t bytes, cu::CUmemoryPool pool, cu::CUstream stream) {
  CNLAB_VGPU_ENTER();
  if (!dptr) return lib().cuda.cuMemAllocFromPoolAsync(dptr, bytes, pool, stream);
  Pool* known = find_pool(pool);
  int gpu = known && known->gpu.load() >= 0 ? known->gpu.load() : gpu_of_stream(stream);
  return pooled_alloc("cuMemAllocFromPoolAsync", dptr, bytes, pool, gpu,
                      [&] { return lib().cuda.cuMemAllocFromPoolAsync(dptr, bytes, pool, stream); });
}

CUresult cuMemAllocFromPoolAsync_ptsz(cu::CUdeviceptr* dptr, size_t bytes, cu::CUmemoryPool pool, cu::CUstream stream) {
  CNLAB_VGPU_ENTER();
  if (!dptr) return lib().cuda.cuMemAllocFromPoolAsync_ptsz(dptr, bytes, pool, stream);
  Pool* known = find_pool(pool);
  int gpu = known && known->gpu.load() >= 0 ? known->gpu.load() : gpu_of_stream(stream);
  return pooled_alloc("cuMemAllocFromPoolAsync", dptr, bytes, pool, gpu,
                      [&] { return lib().cuda.cuMemAllocFromPoolAsync_ptsz(dptr, bytes, pool, stream); });
}

CUresult cuMemFreeAsync(cu::CUdeviceptr dptr, cu::CUstream stream) {
  CNLAB_VGPU_ENTER();
  return pooled_free(dptr, [&] { return lib().cuda.cuMemFreeAsync(dptr, stream); });
}

CUresult cuMemFreeAsync_ptsz(cu::CUdeviceptr dptr, cu::CUstream stream) {
  CNLAB_VGPU_ENTER();
  return pooled_free(dptr, [&] { return lib().cuda.cuMemFreeAsync_ptsz(dptr, stream); });
}

CUresult cuMemPoolTrimTo(cu::CUmemoryPool pool, size_t keep) {
  CNLAB_VGPU_ENTER();
  CUresult r = lib().cuda.cuMemPoolTrimTo(pool, keep);
  if (Pool* p = find_pool(pool)) {
    pthread_mutex_lock(&g_settle);
    settle_locked(*p);
    pthread_mutex_unlock(&g_settle);
  }
  return r;
}

CUresult cuMemPoolDestroy(cu::CUmemoryPool pool) {
  CNLAB_VGPU_ENTER();
  Pool* p = find_pool(pool);
  CUresult r = lib().cuda.cuMemPoolDestroy(pool);
  if (p && r == cu::CUDA_SUCCESS) {
    // Its memory went back to the device; the slot is kept (slots never move) but forgets the pool.
    pthread_mutex_lock(&g_settle);
    if (p->charged) uncharge(p->gpu.load(), p->charged);
    p->charged = 0;
    p->gpu.store(-1);
    pthread_mutex_unlock(&g_settle);
  }
  return r;
}

}  // extern "C"
