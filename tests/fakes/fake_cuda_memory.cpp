// Part of the TEST DOUBLE of libcuda.so.1 (see fake_cuda.cpp for the model): device memory,
// copies, arrays, stream-ordered pools, virtual memory management and IPC memory handles.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "fake_cuda_internal.h"

namespace cnlab::fake_cuda {
namespace {

size_t page_size() {
  static const size_t size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

// What a CUipcMemHandle carries: enough for another process to open the allocation's memfd
// through /proc/<pid>/fd/<fd> and check it is that allocation.
struct IpcMemWire {
  uint64_t magic;
  int32_t pid;
  int32_t fd;
  uint64_t exporter;  // ProcessKey
  uint64_t id;
  uint64_t size;
  CUuuid uuid;
  uint64_t reserved;
};
static_assert(sizeof(IpcMemWire) == sizeof(CUipcMemHandle));
constexpr uint64_t kIpcMemMagic = 0x314D5043464E4C43ull;  // "CLNFCPM1" as little-endian text

std::string memfd_name(int pid, uint64_t id, const std::string& uuid) {
  return "fake-cuda-" + std::to_string(pid) + "-" + std::to_string(id) + "-" + uuid;
}

// The name behind an fd ("/memfd:fake-cuda-... (deleted)"), or "".
std::string fd_target(const std::string& proc_path) {
  char buf[512];
  ssize_t n = readlink(proc_path.c_str(), buf, sizeof buf - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

int make_memfd(uint64_t id, const Device& d, size_t size) {
  std::string name = memfd_name(getpid(), id, d.cfg.uuid_text);
  int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0) return -1;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

void* map_fd(int fd, size_t size, bool low32) {
  int flags = MAP_SHARED;
#ifdef MAP_32BIT
  if (low32) flags |= MAP_32BIT;
#endif
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, flags, fd, 0);
  if (p == MAP_FAILED) return nullptr;
  if (low32 && reinterpret_cast<uintptr_t>(p) + size > 0xFFFFFFFFull) {  // no MAP_32BIT here
    munmap(p, size);
    return nullptr;
  }
  return p;
}

// Makes a memfd-backed block of `size` bytes counted as `counted`. Under g.mu.
Block* allocate_block(Device& d, Context* ctx, Block::Kind kind, size_t size, uint64_t counted, bool low32,
                      CUresult* error) {
  *error = CUDA_ERROR_OUT_OF_MEMORY;
  if (size > d.cfg.total_bytes || counted > d.cfg.total_bytes) return nullptr;
  if (counted && !charge(*d.shared, *d.row, g.self, d.cfg.total_bytes, counted)) return nullptr;
  uint64_t id = g.next_id++;
  size_t mapped = round_up(size, page_size());
  int fd = make_memfd(id, d, mapped);
  void* p = fd >= 0 ? map_fd(fd, mapped, low32) : nullptr;
  if (!p) {
    if (fd >= 0) close(fd);
    if (counted) uncharge(*d.row, counted);
    if (low32) *error = CUDA_ERROR_NOT_SUPPORTED;
    return nullptr;
  }
  auto* b = new Block;
  b->kind = kind;
  b->base = reinterpret_cast<uintptr_t>(p);
  b->size = size;
  b->mapped = mapped;
  b->fd = fd;
  b->id = id;
  b->device = &d;
  b->ctx = ctx;
  b->counted = counted;
  g.blocks[b->base] = b;
  return b;
}

// Unmaps and forgets a memfd-backed or IPC block. `owner`: give its counted bytes back.
void release_block(Block* b, bool owner) {  // under g.mu
  if (b->mapped) munmap(reinterpret_cast<void*>(b->base), b->mapped);
  if (b->fd >= 0) close(b->fd);
  if (owner && b->counted && b->device->row) uncharge(*b->device->row, b->counted);
  g.blocks.erase(b->base);
  delete b;
}

void restore_reservation(uintptr_t base, size_t size) {
  mmap(reinterpret_cast<void*>(base), size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
}

void vmm_free_if_unused(VmmHandle* h, bool owner) {  // under g.mu
  if (h->refs > 0 || h->maps > 0) return;
  if (h->fd >= 0) close(h->fd);
  if (owner && h->counted && h->device->row) uncharge(*h->device->row, h->counted);
  h->magic = kDeadMagic;
  g.vmm_handles.erase(h);
  delete h;
}

// Turns a VMM mapping back into reserved address space.
void release_vmm_block(Block* b, bool owner) {  // under g.mu
  restore_reservation(b->base, b->size);
  VmmHandle* h = b->handle;
  g.blocks.erase(b->base);
  delete b;
  --h->maps;
  vmm_free_if_unused(h, owner);
}

// The block containing address p (any kind), or nullptr. Pool chunks count only while in use.
Block* containing(uintptr_t p) {
  auto it = g.blocks.upper_bound(p);
  if (it == g.blocks.begin()) return nullptr;
  --it;
  Block* b = it->second;
  size_t size = b->kind == Block::kPoolChunk ? (b->in_use ? b->user_size : 0) : b->size;
  return p >= b->base && p - b->base < size ? b : nullptr;
}

size_t addressable(const Block& b) { return b.kind == Block::kPoolChunk ? b.user_size : b.size; }

// True when [p, p + n) is device memory this process may read (and write, if `write`).
bool device_range_ok(uintptr_t p, size_t n, bool write) {  // under g.mu
  if (n == 0) return containing(p) != nullptr;
  if (p + n < p) return false;
  const uintptr_t end = p + n;
  while (p < end) {
    Block* b = containing(p);
    if (!b) return false;
    uintptr_t b_end = b->base + addressable(*b);
    if (b->kind != Block::kVmm) return end <= b_end;  // a plain allocation holds the whole range
    // VMM: contiguous mappings, each granule with the access asked for.
    uintptr_t stop = std::min(end, b_end);
    for (uintptr_t q = p; q < stop; q = (q - b->base) / kGranularity * kGranularity + kGranularity + b->base) {
      int prot = b->prot[(q - b->base) / kGranularity];
      if (!(prot & PROT_READ) || (write && !(prot & PROT_WRITE))) return false;
    }
    p = stop;
  }
  return true;
}

Pool* known_pool(CUmemoryPool handle) {  // under g.mu
  auto* p = reinterpret_cast<Pool*>(handle);
  return g.pools.count(p) && !p->destroyed ? p : nullptr;
}

void release_free_chunks(Pool& pool, uint64_t target, bool owner) {  // under g.mu
  for (size_t i = pool.chunks.size(); i-- > 0;) {
    if (pool.reserved <= target) break;
    Block* c = pool.chunks[i];
    if (c->in_use) continue;
    pool.reserved -= c->size;
    release_block(c, owner);
    pool.chunks.erase(pool.chunks.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

void delete_pool(Pool* pool, bool owner) {  // under g.mu
  for (Block* c : pool->chunks) release_block(c, owner);
  pool->chunks.clear();
  pool->magic = kDeadMagic;
  g.pools.erase(pool);
  delete pool;
}

// Takes an allocation of `size` bytes from `pool`. Under g.mu.
CUresult pool_allocate(Pool& pool, size_t size, CUdeviceptr* dptr) {
  Device& d = *pool.device;
  if (size > d.cfg.total_bytes) return CUDA_ERROR_OUT_OF_MEMORY;
  const uint64_t rounded = round_up(size, kGranularity);
  Block* best = nullptr;
  for (Block* c : pool.chunks) {
    if (!c->in_use && c->size >= rounded && (!best || c->size < best->size)) best = c;
  }
  if (!best) {
    if (pool.props.maxSize && pool.reserved + rounded > pool.props.maxSize) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult error;
    best = allocate_block(d, nullptr, Block::kPoolChunk, rounded, rounded, false, &error);
    if (!best && error == CUDA_ERROR_OUT_OF_MEMORY) {
      release_free_chunks(pool, 0, true);  // as the driver does before giving up
      best = allocate_block(d, nullptr, Block::kPoolChunk, rounded, rounded, false, &error);
    }
    if (!best) return error;
    best->pool = &pool;
    pool.chunks.push_back(best);
    pool.reserved += rounded;
    pool.reserved_high = std::max(pool.reserved_high, pool.reserved);
  }
  best->in_use = true;
  best->user_size = size;
  pool.used += best->size;
  pool.used_high = std::max(pool.used_high, pool.used);
  *dptr = best->base;
  return CUDA_SUCCESS;
}

void pool_free(Block* chunk) {  // under g.mu
  Pool& pool = *chunk->pool;
  chunk->in_use = false;
  chunk->user_size = 0;
  pool.used -= chunk->size;
  pool.device->pools_dirty.store(true, std::memory_order_release);
  if (pool.destroyed && std::none_of(pool.chunks.begin(), pool.chunks.end(), [](Block* c) { return c->in_use; })) {
    delete_pool(&pool, true);
  }
}

uint64_t alloc_delay_us() {  // under g.mu
  return g.config.alloc_delay_us;
}

// cuMemAlloc and friends: `counted` is the size rounded up to 2 MiB.
CUresult mem_alloc(CUdeviceptr* dptr, size_t bytesize, Block::Kind kind, bool low32) {
  REQUIRE_INIT();
  if (!dptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_CONTEXT(ctx);
  uint64_t delay;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    Device& d = *ctx->device;
    if (bytesize > d.cfg.total_bytes) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult error;
    Block* b = allocate_block(d, ctx, kind, bytesize, round_up(bytesize, kGranularity), low32, &error);
    if (!b) return error;
    *dptr = b->base;
    delay = alloc_delay_us();
  }
  sleep_for_us(delay);
  return CUDA_SUCCESS;
}

CUresult mem_alloc_pitch(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height, unsigned elem, bool low32) {
  REQUIRE_INIT();
  if (!dptr || !pitch || width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (elem != 4 && elem != 8 && elem != 16) return CUDA_ERROR_INVALID_VALUE;
  size_t p = round_up(width, 512);
  if (height > (~size_t{0}) / p) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = mem_alloc(dptr, p * height, Block::kAlloc, low32);
  if (r == CUDA_SUCCESS) *pitch = p;
  return r;
}

CUresult mem_free(CUdeviceptr dptr) {
  REQUIRE_INIT();
  if (dptr == 0) return CUDA_SUCCESS;
  uint64_t wait = 0;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    auto it = g.blocks.find(dptr);
    if (it == g.blocks.end()) return CUDA_ERROR_INVALID_VALUE;
    Block* b = it->second;
    if (b->kind == Block::kPoolChunk) {  // no implicit synchronisation for stream-ordered memory
      if (!b->in_use) return CUDA_ERROR_INVALID_VALUE;
      pool_free(b);
      return CUDA_SUCCESS;
    }
    if (b->kind != Block::kAlloc && b->kind != Block::kManaged) return CUDA_ERROR_INVALID_VALUE;
    wait = b->ctx->all_end.load(std::memory_order_acquire);
  }
  if (wait > now_ns()) sleep_until_ns(wait);  // cuMemFree waits for the context's work
  std::lock_guard<std::mutex> lock(g.mu);
  auto it = g.blocks.find(dptr);
  if (it == g.blocks.end() || (it->second->kind != Block::kAlloc && it->second->kind != Block::kManaged)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  release_block(it->second, true);
  return CUDA_SUCCESS;
}

CUresult mem_get_info(size_t* free, size_t* total) {
  REQUIRE_INIT();
  if (!free || !total) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_CONTEXT(ctx);
  std::lock_guard<std::mutex> lock(g.mu);
  Device& d = *ctx->device;
  sweep(*d.shared, g.self);
  uint64_t used = used_bytes(*d.shared);
  *total = d.cfg.total_bytes;
  *free = used >= d.cfg.total_bytes ? 0 : d.cfg.total_bytes - used;
  return CUDA_SUCCESS;
}

CUresult mem_get_address_range(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  REQUIRE_INIT();
  std::lock_guard<std::mutex> lock(g.mu);
  Block* b = containing(dptr);
  if (!b) return CUDA_ERROR_NOT_FOUND;
  if (pbase) *pbase = b->base;
  if (psize) *psize = addressable(*b);
  return CUDA_SUCCESS;
}

enum class Side { kHost, kDevice, kUnified };

// A copy (or, with `fill`, a memset of `value` repeated in `width`-byte units). Synchronous calls
// wait for the stream first (the legacy stream, or the per-thread stream in _ptds); every copy
// takes no simulated time.
CUresult transfer(uintptr_t dst, Side dst_side, uintptr_t src, Side src_side, size_t bytes, CUstream stream,
                  bool async, bool per_thread, bool fill = false, uint32_t value = 0, unsigned width = 1) {
  REQUIRE_INIT();
  CUresult error;
  Stream* s = resolve_stream(stream, per_thread, &error);
  if (!s) return error;
  if (!s->ctx->alive.load(std::memory_order_acquire)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    if (dst_side == Side::kUnified) dst_side = containing(dst) ? Side::kDevice : Side::kHost;
    if (!fill && src_side == Side::kUnified) src_side = containing(src) ? Side::kDevice : Side::kHost;
    if (dst_side == Side::kDevice ? !device_range_ok(dst, bytes, true) : (!dst && bytes > 0)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (!fill && (src_side == Side::kDevice ? !device_range_ok(src, bytes, false) : (!src && bytes > 0))) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (!async) sleep_until_ns(stream_done(*s));
  if (bytes == 0) return CUDA_SUCCESS;
  if (!fill) {
    std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
  } else if (width == 1) {
    std::memset(reinterpret_cast<void*>(dst), static_cast<int>(value & 0xFF), bytes);
  } else {
    auto* out = reinterpret_cast<char*>(dst);
    for (size_t i = 0; i < bytes; i += width) std::memcpy(out + i, &value, width);
  }
  return CUDA_SUCCESS;
}

CUresult memset_d32(CUdeviceptr dst, unsigned value, size_t n, CUstream stream, bool async, bool per_thread) {
  if (dst % 4 != 0) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
  if (n > (~size_t{0}) / 4) return CUDA_ERROR_INVALID_VALUE;
  return transfer(dst, Side::kDevice, 0, Side::kHost, n * 4, stream, async, per_thread, true, value, 4);
}

// -- arrays ---------------------------------------------------------------------------------------

unsigned format_bytes(CUarray_format format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: return 4;
    default: return 0;  // video and block-compressed formats are not modelled
  }
}

// Counted bytes of one array level, or 0 when the descriptor is invalid.
uint64_t level_bytes(size_t w, size_t h, size_t d, CUarray_format format, unsigned channels) {
  unsigned elem = format_bytes(format);
  if (w == 0 || elem == 0 || (channels != 1 && channels != 2 && channels != 4) || (h == 0 && d != 0)) return 0;
  __uint128_t bytes = static_cast<__uint128_t>(w) * std::max<size_t>(h, 1) * std::max<size_t>(d, 1) * elem * channels;
  if (bytes > (static_cast<__uint128_t>(1) << 62)) return 0;
  return round_up(static_cast<uint64_t>(bytes), kArrayAlignment);
}

// Charges `counted` bytes for an array (sleeping FAKE_CUDA_ALLOC_DELAY_US after). Under g.mu.
CUresult charge_array(Device& d, uint64_t counted) {
  if (counted > d.cfg.total_bytes || !charge(*d.shared, *d.row, g.self, d.cfg.total_bytes, counted)) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

CUresult create_array(CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR& desc, bool three_d) {
  REQUIRE_INIT();
  uint64_t counted = level_bytes(desc.Width, desc.Height, desc.Depth, desc.Format, desc.NumChannels);
  if (!handle || counted == 0) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_CONTEXT(ctx);
  uint64_t delay;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    if (CUresult r = charge_array(*ctx->device, counted); r != CUDA_SUCCESS) return r;
    auto* a = new Array;
    a->ctx = ctx;
    a->desc = desc;
    a->three_d = three_d;
    a->counted = counted;
    ctx->arrays.insert(a);
    g.arrays.insert(a);
    *handle = reinterpret_cast<CUarray>(a);
    delay = alloc_delay_us();
  }
  sleep_for_us(delay);
  return CUDA_SUCCESS;
}

Array* known_array(CUarray handle) {  // under g.mu
  auto* a = reinterpret_cast<Array*>(handle);
  return g.arrays.count(a) ? a : nullptr;
}

MipmappedArray* known_mipmap(CUmipmappedArray handle) {  // under g.mu
  auto* m = reinterpret_cast<MipmappedArray*>(handle);
  return g.mipmaps.count(m) ? m : nullptr;
}

bool valid_alloc_prop(const CUmemAllocationProp* prop, CUresult* error) {  // under g.mu
  *error = CUDA_ERROR_INVALID_VALUE;
  if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return false;
  }
  if (!device_at(prop->location.id)) {
    *error = CUDA_ERROR_INVALID_DEVICE;
    return false;
  }
  return true;
}

VmmHandle* known_handle(CUmemGenericAllocationHandle handle) {  // under g.mu
  auto* h = reinterpret_cast<VmmHandle*>(static_cast<uintptr_t>(handle));
  return g.vmm_handles.count(h) ? h : nullptr;
}

// The reservation holding [p, p + n), or end().
std::map<uintptr_t, size_t>::iterator reservation_of(uintptr_t p, size_t n) {
  auto it = g.reservations.upper_bound(p);
  if (it == g.reservations.begin()) return g.reservations.end();
  --it;
  if (p < it->first || p + n > it->first + it->second || p + n < p) return g.reservations.end();
  return it;
}

// The VMM mappings that intersect [p, p + n), in address order.
std::vector<Block*> vmm_blocks_in(uintptr_t p, size_t n) {
  std::vector<Block*> out;
  auto it = g.blocks.upper_bound(p);
  if (it != g.blocks.begin()) --it;
  for (; it != g.blocks.end() && it->first < p + n; ++it) {
    Block* b = it->second;
    if (b->kind == Block::kVmm && b->base + b->size > p) out.push_back(b);
  }
  return out;
}

}  // namespace

// -- helpers for fake_cuda.cpp ----------------------------------------------------------------------

Block* find_block(uintptr_t p, size_t n) {
  Block* b = containing(p);
  return b && p + n <= b->base + addressable(*b) ? b : nullptr;
}

void free_context_memory(Context& ctx) {
  std::vector<Block*> owned;
  for (auto& [base, b] : g.blocks) {
    if (b->ctx == &ctx && (b->kind == Block::kAlloc || b->kind == Block::kManaged || b->kind == Block::kIpc)) {
      owned.push_back(b);
    }
  }
  for (Block* b : owned) release_block(b, true);
}

void free_array_memory(Device& device, uint64_t counted) {
  if (device.row) uncharge(*device.row, counted);
}

void destroy_pool_memory(Pool& pool, bool owner) { delete_pool(&pool, owner); }

void free_all_memory(bool owner) {
  std::vector<Block*> blocks;
  for (auto& [base, b] : g.blocks) blocks.push_back(b);
  for (Block* b : blocks) {
    if (b->kind == Block::kVmm) {
      g.blocks.erase(b->base);  // the reservation goes below
      delete b;
    } else if (b->kind != Block::kPoolChunk) {
      release_block(b, owner);
    }
  }
  std::vector<Pool*> pools(g.pools.begin(), g.pools.end());
  for (Pool* p : pools) delete_pool(p, owner);
  for (VmmHandle* h : std::vector<VmmHandle*>(g.vmm_handles.begin(), g.vmm_handles.end())) {
    h->refs = 0;
    h->maps = 0;
    vmm_free_if_unused(h, owner);
  }
  for (auto& [base, size] : g.reservations) munmap(reinterpret_cast<void*>(base), size);
  g.reservations.clear();
  for (auto& d : g.devices) d->default_pool = d->current_pool = nullptr;
}

void release_pools_at_sync(Device& device) {
  if (!device.pools_dirty.exchange(false, std::memory_order_acq_rel)) return;
  std::lock_guard<std::mutex> lock(g.mu);
  for (Pool* p : g.pools) {
    if (p->device == &device && p->reserved > p->release_threshold) {
      release_free_chunks(*p, p->release_threshold, true);
    }
  }
}

}  // namespace cnlab::fake_cuda

using namespace cnlab::fake_cuda;

extern "C" {

// -- allocation -----------------------------------------------------------------------------------

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) { return mem_alloc(dptr, bytesize, Block::kAlloc, false); }

CUresult cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytesize) {
  if (!dptr) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
  CUdeviceptr p = 0;
  CUresult r = mem_alloc(&p, bytesize, Block::kAlloc, /*low32=*/true);
  if (r == CUDA_SUCCESS) *dptr = static_cast<CUdeviceptr_v1>(p);
  return r;
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes) {
  return mem_alloc_pitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes, false);
}

CUresult cuMemAllocPitch(CUdeviceptr_v1* dptr, unsigned int* pPitch, unsigned int WidthInBytes, unsigned int Height,
                         unsigned int ElementSizeBytes) {
  if (!dptr || !pPitch) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
  CUdeviceptr p = 0;
  size_t pitch = 0;
  CUresult r = mem_alloc_pitch(&p, &pitch, WidthInBytes, Height, ElementSizeBytes, true);
  if (r == CUDA_SUCCESS) {
    *dptr = static_cast<CUdeviceptr_v1>(p);
    *pPitch = static_cast<unsigned>(pitch);
  }
  return r;
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) {
    return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
  }
  return mem_alloc(dptr, bytesize, Block::kManaged, false);
}

CUresult cuMemFree_v2(CUdeviceptr dptr) { return mem_free(dptr); }
CUresult cuMemFree(CUdeviceptr_v1 dptr) { return mem_free(dptr); }

CUresult cuMemGetInfo_v2(size_t* free, size_t* total) { return mem_get_info(free, total); }

CUresult cuMemGetInfo(unsigned int* free, unsigned int* total) {
  if (!free || !total) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
  size_t f = 0, t = 0;
  CUresult r = mem_get_info(&f, &t);
  if (r == CUDA_SUCCESS) {
    *free = static_cast<unsigned>(std::min<size_t>(f, 0xFFFFFFFFu));
    *total = static_cast<unsigned>(std::min<size_t>(t, 0xFFFFFFFFu));
  }
  return r;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  return mem_get_address_range(pbase, psize, dptr);
}

CUresult cuMemGetAddressRange(CUdeviceptr_v1* pbase, unsigned int* psize, CUdeviceptr_v1 dptr) {
  CUdeviceptr base = 0;
  size_t size = 0;
  CUresult r = mem_get_address_range(&base, &size, dptr);
  if (r == CUDA_SUCCESS) {
    if (pbase) *pbase = static_cast<CUdeviceptr_v1>(base);
    if (psize) *psize = static_cast<unsigned>(size);
  }
  return r;
}

// -- copies and memsets ---------------------------------------------------------------------------

CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  return transfer(dstDevice, Side::kDevice, reinterpret_cast<uintptr_t>(srcHost), Side::kHost, ByteCount, nullptr,
                  false, false);
}
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  return transfer(dstDevice, Side::kDevice, reinterpret_cast<uintptr_t>(srcHost), Side::kHost, ByteCount, nullptr,
                  false, true);
}
CUresult cuMemcpyHtoD(CUdeviceptr_v1 dstDevice, const void* srcHost, unsigned int ByteCount) {
  return cuMemcpyHtoD_v2(dstDevice, srcHost, ByteCount);
}
CUresult cuMemcpyDtoH_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  return transfer(reinterpret_cast<uintptr_t>(dstHost), Side::kHost, srcDevice, Side::kDevice, ByteCount, nullptr,
                  false, false);
}
CUresult cuMemcpyDtoH_v2_ptds(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  return transfer(reinterpret_cast<uintptr_t>(dstHost), Side::kHost, srcDevice, Side::kDevice, ByteCount, nullptr,
                  false, true);
}
CUresult cuMemcpyDtoH(void* dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount) {
  return cuMemcpyDtoH_v2(dstHost, srcDevice, ByteCount);
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  return transfer(dstDevice, Side::kDevice, srcDevice, Side::kDevice, ByteCount, nullptr, false, false);
}
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  return transfer(dstDevice, Side::kDevice, srcDevice, Side::kDevice, ByteCount, nullptr, false, true);
}
CUresult cuMemcpyDtoD(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice, unsigned int ByteCount) {
  return cuMemcpyDtoD_v2(dstDevice, srcDevice, ByteCount);
}
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  return transfer(dst, Side::kUnified, src, Side::kUnified, ByteCount, nullptr, false, false);
}
CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  return transfer(dst, Side::kUnified, src, Side::kUnified, ByteCount, nullptr, false, true);
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  return transfer(dst, Side::kUnified, src, Side::kUnified, ByteCount, hStream, true, false);
}
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  return transfer(dst, Side::kUnified, src, Side::kUnified, ByteCount, hStream, true, true);
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount, CUstream hStream) {
  return transfer(dstDevice, Side::kDevice, reinterpret_cast<uintptr_t>(srcHost), Side::kHost, ByteCount, hStream,
                  true, false);
}
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount, CUstream hStream) {
  return transfer(dstDevice, Side::kDevice, reinterpret_cast<uintptr_t>(srcHost), Side::kHost, ByteCount, hStream,
                  true, true);
}
CUresult cuMemcpyDtoHAsync_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  return transfer(reinterpret_cast<uintptr_t>(dstHost), Side::kHost, srcDevice, Side::kDevice, ByteCount, hStream,
                  true, false);
}
CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  return transfer(reinterpret_cast<uintptr_t>(dstHost), Side::kHost, srcDevice, Side::kDevice, ByteCount, hStream,
                  true, true);
}
CUresult cuMemcpyHtoDAsync(CUdeviceptr_v1 dstDevice, const void* srcHost, unsigned int ByteCount, CUstream hStream) {
  return cuMemcpyHtoDAsync_v2(dstDevice, srcHost, ByteCount, hStream);
}
CUresult cuMemcpyDtoHAsync(void* dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount, CUstream hStream) {
  return cuMemcpyDtoHAsync_v2(dstHost, srcDevice, ByteCount, hStream);
}
CUresult cuMemcpyDtoDAsync(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice, unsigned int ByteCount,
                           CUstream hStream) {
  return cuMemcpyDtoDAsync_v2(dstDevice, srcDevice, ByteCount, hStream);
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  return transfer(dstDevice, Side::kDevice, srcDevice, Side::kDevice, ByteCount, hStream, true, false);
}
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  return transfer(dstDevice, Side::kDevice, srcDevice, Side::kDevice, ByteCount, hStream, true, true);
}

CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  return transfer(dstDevice, Side::kDevice, 0, Side::kHost, N, nullptr, false, false, true, uc, 1);
}
CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  return transfer(dstDevice, Side::kDevice, 0, Side::kHost, N, nullptr, false, true, true, uc, 1);
}
CUresult cuMemsetD8(CUdeviceptr_v1 dstDevice, unsigned char uc, unsigned int N) {
  return cuMemsetD8_v2(dstDevice, uc, N);
}
CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
  return transfer(dstDevice, Side::kDevice, 0, Side::kHost, N, hStream, true, false, true, uc, 1);
}
CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
  return transfer(dstDevice, Side::kDevice, 0, Side::kHost, N, hStream, true, true, true, uc, 1);
}
CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  return memset_d32(dstDevice, ui, N, nullptr, false, false);
}
CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  return memset_d32(dstDevice, ui, N, nullptr, false, true);
}
CUresult cuMemsetD32(CUdeviceptr_v1 dstDevice, unsigned int ui, unsigned int N) {
  return memset_d32(dstDevice, ui, N, nullptr, false, false);
}
CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
  return memset_d32(dstDevice, ui, N, hStream, true, false);
}
CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
  return memset_d32(dstDevice, ui, N, hStream, true, true);
}

// -- arrays ---------------------------------------------------------------------------------------

CUresult cuArrayCreate_v2(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* pAllocateArray) {
  if (!pAllocateArray) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
  CUDA_ARRAY3D_DESCRIPTOR d{};
  d.Width = pAllocateArray->Width;
  d.Height = pAllocateArray->Height;
  d.Format = pAllocateArray->Format;
  d.NumChannels = pAllocateArray->NumChannels;
  return create_array(pHandle, d, false);
}

CUresult cuArrayCreate(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR_v1* pAllocateArray) {
  if (!pAllocateArray) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
  CUDA_ARRAY_DESCRIPTOR d{pAllocateArray->Width, pAllocateArray->Height, pAllocateArray->Format,
                          pAllocateArray->NumChannels};
  return cuArrayCreate_v2(pHandle, &d);
}

CUresult cuArray3DCreate_v2(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* pAllocateArray) {
  if (!pAllocateArray) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
  return create_array(pHandle, *pAllocateArray, true);
}

CUresult cuArray3DCreate(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1* pAllocateArray) {
  if (!pAllocateArray) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
  CUDA_ARRAY3D_DESCRIPTOR d{pAllocateArray->Width, pAllocateArray->Height, pAllocateArray->Depth,
                            pAllocateArray->Format, pAllocateArray->NumChannels, pAllocateArray->Flags};
  return create_array(pHandle, d, true);
}

CUresult cuArrayDestroy(CUarray hArray) {
  REQUIRE_INIT();
  std::lock_guard<std::mutex> lock(g.mu);
  Array* a = known_array(hArray);
  if (!a) return CUDA_ERROR_INVALID_HANDLE;
  free_array_memory(*a->ctx->device, a->counted);
  a->ctx->arrays.erase(a);
  g.arrays.erase(a);
  delete a;
  return CUDA_SUCCESS;
}

CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR* pArrayDescriptor, CUarray hArray) {
  REQUIRE_INIT();
  if (!pArrayDescriptor) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  Array* a = known_array(hArray);
  if (!a) return CUDA_ERROR_INVALID_HANDLE;
  pArrayDescriptor->Width = a->desc.Width;
  pArrayDescriptor->Height = a->desc.Height;
  pArrayDescriptor->Format = a->desc.Format;
  pArrayDescriptor->NumChannels = a->desc.NumChannels;
  return CUDA_SUCCESS;
}

CUresult cuArrayGetDescriptor(CUDA_ARRAY_DESCRIPTOR_v1* pArrayDescriptor, CUarray hArray) {
  if (!pArrayDescriptor) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
  CUDA_ARRAY_DESCRIPTOR d{};
  CUresult r = cuArrayGetDescriptor_v2(&d, hArray);
  if (r == CUDA_SUCCESS) {
    *pArrayDescriptor = {static_cast<unsigned>(d.Width), static_cast<unsigned>(d.Height), d.Format, d.NumChannels};
  }
  return r;
}

CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR* pArrayDescriptor, CUarray hArray) {
  REQUIRE_INIT();
  if (!pArrayDescriptor) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  Array* a = known_array(hArray);
  if (!a) return CUDA_ERROR_INVALID_HANDLE;
  *pArrayDescriptor = a->desc;
  return CUDA_SUCCESS;
}

CUresult cuArray3DGetDescriptor(CUDA_ARRAY3D_DESCRIPTOR_v1* pArrayDescriptor, CUarray hArray) {
  if (!pArrayDescriptor) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
  CUDA_ARRAY3D_DESCRIPTOR d{};
  CUresult r = cuArray3DGetDescriptor_v2(&d, hArray);
  if (r == CUDA_SUCCESS) {
    *pArrayDescriptor = {static_cast<unsigned>(d.Width), static_cast<unsigned>(d.Height),
                         static_cast<unsigned>(d.Depth), d.Format, d.NumChannels, d.Flags};
  }
  return r;
}

CUresult cuArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* memoryRequirements, CUarray array,
                                      CUdevice device) {
  REQUIRE_INIT();
  if (!memoryRequirements) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  Array* a = known_array(array);
  if (!a) return CUDA_ERROR_INVALID_HANDLE;
  if (device != a->ctx->device->ordinal) return CUDA_ERROR_INVALID_DEVICE;
  *memoryRequirements = {};
  memoryRequirements->size = a->counted;
  memoryRequirements->alignment = kArrayAlignment;
  return CUDA_SUCCESS;
}

CUresult cuMipmappedArrayCreate(CUmipmappedArray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* pMipmappedArrayDesc,
                                unsigned int numMipmapLevels) {
  REQUIRE_INIT();
  if (!pHandle || !pMipmappedArrayDesc || numMipmapLevels == 0) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_ARRAY3D_DESCRIPTOR& desc = *pMipmappedArrayDesc;
  size_t largest = std::max({desc.Width, desc.Height, desc.Depth});
  unsigned max_levels = 1;
  while (largest >> max_levels) ++max_levels;  // 1 + floor(log2(largest))
  if (numMipmapLevels > max_levels) return CUDA_ERROR_INVALID_VALUE;
  uint64_t counted = 0;
  for (unsigned level = 0; level < numMipmapLevels; ++level) {
    auto shrink = [level](size_t extent) { return extent == 0 ? size_t{0} : std::max<size_t>(extent >> level, 1); };
    uint64_t bytes = level_bytes(shrink(desc.Width), shrink(desc.Height), shrink(desc.Depth), desc.Format,
                                 desc.NumChannels);
    if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    counted += bytes;
  }
  REQUIRE_CONTEXT(ctx);
  uint64_t delay;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    if (CUresult r = charge_array(*ctx->device, counted); r != CUDA_SUCCESS) return r;
    auto* m = new MipmappedArray;
    m->ctx = ctx;
    m->desc = desc;
    m->levels = numMipmapLevels;
    m->counted = counted;
    ctx->mipmaps.insert(m);
    g.mipmaps.insert(m);
    *pHandle = reinterpret_cast<CUmipmappedArray>(m);
    delay = alloc_delay_us();
  }
  sleep_for_us(delay);
  return CUDA_SUCCESS;
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
  REQUIRE_INIT();
  std::lock_guard<std::mutex> lock(g.mu);
  MipmappedArray* m = known_mipmap(hMipmappedArray);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  free_array_memory(*m->ctx->device, m->counted);
  m->ctx->mipmaps.erase(m);
  g.mipmaps.erase(m);
  delete m;
  return CUDA_SUCCESS;
}

CUresult cuMipmappedArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* memoryRequirements,
                                               CUmipmappedArray mipmap, CUdevice device) {
  REQUIRE_INIT();
  if (!memoryRequirements) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  MipmappedArray* m = known_mipmap(mipmap);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  if (device != m->ctx->device->ordinal) return CUDA_ERROR_INVALID_DEVICE;
  *memoryRequirements = {};
  memoryRequirements->size = m->counted;
  memoryRequirements->alignment = kArrayAlignment;
  return CUDA_SUCCESS;
}

// -- stream-ordered allocation --------------------------------------------------------------------

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool_out, CUdevice dev) {
  REQUIRE_INIT();
  if (!pool_out) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  Device* d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  *pool_out = reinterpret_cast<CUmemoryPool>(d->default_pool);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  REQUIRE_INIT();
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  Device* d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  *pool = reinterpret_cast<CUmemoryPool>(d->current_pool);
  return CUDA_SUCCESS;
}

CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  REQUIRE_INIT();
  std::lock_guard<std::mutex> lock(g.mu);
  Device* d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  Pool* p = known_pool(pool);
  if (!p || p->device != d) return CUDA_ERROR_INVALID_VALUE;
  d->current_pool = p;
  return CUDA_SUCCESS;
}

CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps) {
  REQUIRE_INIT();
  if (!pool || !poolProps) return CUDA_ERROR_INVALID_VALUE;
  if (poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED || poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (poolProps->handleTypes & ~static_cast<unsigned>(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  std::lock_guard<std::mutex> lock(g.mu);
  Device* d = device_at(poolProps->location.id);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  auto* p = new Pool;
  p->device = d;
  p->props = *poolProps;
  g.pools.insert(p);
  *pool = reinterpret_cast<CUmemoryPool>(p);
  return CUDA_SUCCESS;
}

CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  REQUIRE_INIT();
  std::lock_guard<std::mutex> lock(g.mu);
  Pool* p = known_pool(pool);
  if (!p || p->is_default) return CUDA_ERROR_INVALID_VALUE;
  if (p->device->current_pool == p) p->device->current_pool = p->device->default_pool;
  release_free_chunks(*p, 0, true);
  if (p->chunks.empty()) {
    delete_pool(p, true);
  } else {
    p->destroyed = true;  // goes when its last allocation is freed
  }
  return CUDA_SUCCESS;
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  REQUIRE_INIT();
  std::lock_guard<std::mutex> lock(g.mu);
  Pool* p = known_pool(pool);
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  release_free_chunks(*p, minBytesToKeep, true);
  return CUDA_SUCCESS;
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  REQUIRE_INIT();
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  Pool* p = known_pool(pool);
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  auto* u64 = static_cast<cuuint64_t*>(value);
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: *static_cast<int*>(value) = p->reuse[attr - 1]; break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *u64 = p->release_threshold; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *u64 = p->reserved; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *u64 = p->reserved_high; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *u64 = p->used; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *u64 = p->used_high; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  REQUIRE_INIT();
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  Pool* p = known_pool(pool);
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  cuuint64_t u64 = 0;
  std::memcpy(&u64, value, sizeof u64);
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: p->reuse[attr - 1] = *static_cast<int*>(value); break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      p->release_threshold = u64;
      p->device->pools_dirty.store(true, std::memory_order_release);
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      if (u64 != 0) return CUDA_ERROR_INVALID_VALUE;  // only a reset to the current value
      p->reserved_high = p->reserved;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      if (u64 != 0) return CUDA_ERROR_INVALID_VALUE;
      p->used_high = p->used;
      break;
    default: return CUDA_ERROR_INVALID_VALUE;  // the *_CURRENT attributes are read-only
  }
  return CUDA_SUCCESS;
}

static CUresult alloc_async(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, bool from_pool, CUstream hStream,
                            bool per_thread) {
  REQUIRE_INIT();
  if (!dptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  CUresult error;
  Stream* s = resolve_stream(hStream, per_thread, &error);
  if (!s) return error;
  if (!s->ctx->alive.load(std::memory_order_acquire)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  uint64_t delay;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    Pool* p = from_pool ? known_pool(pool) : s->ctx->device->current_pool;
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = pool_allocate(*p, bytesize, dptr); r != CUDA_SUCCESS) return r;
    delay = alloc_delay_us();
  }
  sleep_for_us(delay);
  return CUDA_SUCCESS;
}

CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return alloc_async(dptr, bytesize, nullptr, false, hStream, false);
}
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return alloc_async(dptr, bytesize, nullptr, false, hStream, true);
}
CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
  return alloc_async(dptr, bytesize, pool, true, hStream, false);
}
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
  return alloc_async(dptr, bytesize, pool, true, hStream, true);
}

static CUresult free_async(CUdeviceptr dptr, CUstream hStream, bool per_thread) {
  REQUIRE_INIT();
  CUresult error;
  Stream* s = resolve_stream(hStream, per_thread, &error);
  if (!s) return error;
  std::lock_guard<std::mutex> lock(g.mu);
  auto it = g.blocks.find(dptr);
  if (it == g.blocks.end()) return CUDA_ERROR_INVALID_VALUE;
  Block* b = it->second;
  if (b->kind == Block::kPoolChunk && b->in_use) {
    pool_free(b);
  } else if (b->kind == Block::kAlloc || b->kind == Block::kManaged) {
    release_block(b, true);
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) { return free_async(dptr, hStream, false); }
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) { return free_async(dptr, hStream, true); }

// -- virtual memory management --------------------------------------------------------------------

CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                       CUmemAllocationGranularity_flags option) {
  REQUIRE_INIT();
  if (!granularity) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> lock(g.mu);
  CUresult error;
  if (!valid_alloc_prop(prop, &error)) return error;
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                     unsigned long long flags) {
  REQUIRE_INIT();
  if (!handle || flags != 0 || size == 0 || size % kGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
  if (prop && (prop->requestedHandleTypes & ~static_cast<unsigned>(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  uint64_t delay;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    CUresult error;
    if (!valid_alloc_prop(prop, &error)) return error;
    Device& d = *device_at(prop->location.id);
    if (size > d.cfg.total_bytes || !charge(*d.shared, *d.row, g.self, d.cfg.total_bytes, size)) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t id = g.next_id++;
    int fd = make_memfd(id, d, size);
    if (fd < 0) {
      uncharge(*d.row, size);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    auto* h = new VmmHandle;
    h->device = &d;
    h->size = size;
    h->fd = fd;
    h->id = id;
    h->prop = *prop;
    h->counted = size;
    g.vmm_handles.insert(h);
    *handle = reinterpret_cast<uintptr_t>(h);
    delay = alloc_delay_us();
  }
  sleep_for_us(delay);
  return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  REQUIRE_INIT();
  std::lock_guard<std::mutex> lock(g.mu);
  VmmHandle* h = known_handle(handle);
  if (!h || h->refs == 0) return CUDA_ERROR_INVALID_VALUE;
  --h->refs;
  vmm_free_if_unused(h, true);  // freed now, or at its last cuMemUnmap
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  REQUIRE_INIT();
  if (!ptr || flags != 0 || size == 0 || size % page_size() != 0 || addr % page_size() != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (alignment & (alignment - 1)) return CUDA_ERROR_INVALID_VALUE;
  alignment = std::max<size_t>(alignment, kGranularity);
  std::lock_guard<std::mutex> lock(g.mu);
  const int kFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  void* p = MAP_FAILED;
  if (addr != 0 && addr % alignment == 0) {
    p = mmap(reinterpret_cast<void*>(addr), size, PROT_NONE, kFlags | MAP_FIXED_NOREPLACE, -1, 0);
    if (p != MAP_FAILED && reinterpret_cast<uintptr_t>(p) != addr) {  // old kernels treat it as a hint
      munmap(p, size);
      p = MAP_FAILED;
    }
  }
  if (p == MAP_FAILED) {
    size_t span = size + alignment;
    void* raw = mmap(nullptr, span, PROT_NONE, kFlags, -1, 0);
    if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    uintptr_t start = round_up(reinterpret_cast<uintptr_t>(raw), alignment);
    uintptr_t raw_start = reinterpret_cast<uintptr_t>(raw);
    if (start > raw_start) munmap(raw, start - raw_start);
    if (raw_start + span > start + size) munmap(reinterpret_cast<void*>(start + size), raw_start + span - start - size);
    p = reinterpret_cast<void*>(start);
  }
  g.reservations[reinterpret_cast<uintptr_t>(p)] = size;
  *ptr = reinterpret_cast<uintptr_t>(p);
  return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  REQUIRE_INIT();
  std::lock_guard<std::mutex> lock(g.mu);
  auto it = g.reservations.find(ptr);
  if (it == g.reservations.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  for (Block* b : vmm_blocks_in(ptr, size)) release_vmm_block(b, true);  // still mapped: unmapped here
  munmap(reinterpret_cast<void*>(ptr), size);
  g.reservations.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  REQUIRE_INIT();
  if (flags != 0 || size == 0 || ptr % kGranularity || size % kGranularity || offset % kGranularity) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> lock(g.mu);
  VmmHandle* h = known_handle(handle);
  if (!h || offset + size > h->size || offset + size < offset) return CUDA_ERROR_INVALID_VALUE;
  if (reservation_of(ptr, size) == g.reservations.end()) return CUDA_ERROR_INVALID_VALUE;
  if (!vmm_blocks_in(ptr, size).empty()) return CUDA_ERROR_INVALID_VALUE;  // already mapped there
  void* p = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED, h->fd,
                 static_cast<off_t>(offset));
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  auto* b = new Block;
  b->kind = Block::kVmm;
  b->base = ptr;
  b->size = size;
  b->device = h->device;
  b->handle = h;
  b->handle_offset = offset;
  b->prot.assign(size / kGranularity, PROT_NONE);  // cuMemSetAccess makes it accessible
  g.blocks[ptr] = b;
  ++h->maps;
  return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  REQUIRE_INIT();
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  std::vector<Block*> blocks = vmm_blocks_in(ptr, size);
  if (blocks.empty()) return CUDA_ERROR_INVALID_VALUE;
  for (Block* b : blocks) {
    if (b->base < ptr || b->base + b->size > ptr + size) return CUDA_ERROR_INVALID_VALUE;  // part of a mapping
  }
  for (Block* b : blocks) release_vmm_block(b, true);
  return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  REQUIRE_INIT();
  if (!desc || count == 0 || size == 0 || ptr % kGranularity || size % kGranularity) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  int prot = PROT_NONE;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    if (!device_at(desc[i].location.id)) return CUDA_ERROR_INVALID_DEVICE;
    switch (desc[i].flags) {
      case CU_MEM_ACCESS_FLAGS_PROT_NONE: break;
      case CU_MEM_ACCESS_FLAGS_PROT_READ: prot |= PROT_READ; break;
      case CU_MEM_ACCESS_FLAGS_PROT_READWRITE: prot |= PROT_READ | PROT_WRITE; break;
      default: return CUDA_ERROR_INVALID_VALUE;
    }
  }
  // The whole range must be mapped, without holes.
  std::vector<Block*> blocks = vmm_blocks_in(ptr, size);
  uintptr_t next = ptr;
  for (Block* b : blocks) {
    if (b->base > next) return CUDA_ERROR_INVALID_VALUE;
    next = b->base + b->size;
  }
  if (blocks.empty() || next < ptr + size) return CUDA_ERROR_INVALID_VALUE;
  for (Block* b : blocks) {
    uintptr_t from = std::max<uintptr_t>(ptr, b->base), to = std::min<uintptr_t>(ptr + size, b->base + b->size);
    if (mprotect(reinterpret_cast<void*>(from), to - from, prot) != 0) return CUDA_ERROR_INVALID_VALUE;
    for (uintptr_t q = from; q < to; q += kGranularity) b->prot[(q - b->base) / kGranularity] = static_cast<uint8_t>(prot);
  }
  return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  REQUIRE_INIT();
  if (!prop) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  VmmHandle* h = known_handle(handle);
  if (!h) return CUDA_ERROR_INVALID_VALUE;
  *prop = h->prop;
  return CUDA_SUCCESS;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  REQUIRE_INIT();
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  Block* b = containing(reinterpret_cast<uintptr_t>(addr));
  if (!b || b->kind != Block::kVmm) return CUDA_ERROR_INVALID_VALUE;
  ++b->handle->refs;
  *handle = reinterpret_cast<uintptr_t>(b->handle);
  return CUDA_SUCCESS;
}

CUresult cuMemExportToShareableHandle(void* shareableHandle, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType handleType, unsigned long long flags) {
  REQUIRE_INIT();
  if (!shareableHandle || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  std::lock_guard<std::mutex> lock(g.mu);
  VmmHandle* h = known_handle(handle);
  if (!h || !(h->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) return CUDA_ERROR_INVALID_VALUE;
  int fd = fcntl(h->fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *static_cast<int*>(shareableHandle) = fd;
  return CUDA_SUCCESS;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* osHandle,
                                        CUmemAllocationHandleType shHandleType) {
  REQUIRE_INIT();
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(osHandle));
  // "/memfd:fake-cuda-<pid>-<id>-<uuid> (deleted)"
  std::string target = fd_target("/proc/self/fd/" + std::to_string(fd));
  const std::string prefix = "/memfd:fake-cuda-";
  if (target.compare(0, prefix.size(), prefix) != 0) return CUDA_ERROR_INVALID_VALUE;
  size_t uuid_at = target.find("-GPU-");
  CUuuid uuid{};
  if (uuid_at == std::string::npos || !parse_uuid(target.substr(uuid_at + 1, 40), uuid)) return CUDA_ERROR_INVALID_VALUE;
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  Device* d = device_by_uuid(uuid);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  auto* h = new VmmHandle;
  h->device = d;
  h->size = static_cast<size_t>(st.st_size);
  h->fd = own;
  h->id = g.next_id++;
  h->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  h->prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  h->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  h->prop.location.id = d->ordinal;
  h->counted = 0;  // counted to the process that created it
  g.vmm_handles.insert(h);
  *handle = reinterpret_cast<uintptr_t>(h);
  return CUDA_SUCCESS;
}

// -- IPC memory handles ---------------------------------------------------------------------------

CUresult cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  REQUIRE_INIT();
  if (!pHandle) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g.mu);
  auto it = g.blocks.find(dptr);
  if (it == g.blocks.end() || it->second->kind != Block::kAlloc) return CUDA_ERROR_INVALID_VALUE;
  const Block& b = *it->second;
  IpcMemWire wire{};
  wire.magic = kIpcMemMagic;
  wire.pid = getpid();
  wire.fd = b.fd;
  wire.exporter = g.self;
  wire.id = b.id;
  wire.size = b.size;
  wire.uuid = b.device->cfg.uuid;
  std::memcpy(pHandle, &wire, sizeof wire);
  return CUDA_SUCCESS;
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  REQUIRE_INIT();
  if (!pdptr || (Flags & ~static_cast<unsigned>(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_CONTEXT(ctx);
  IpcMemWire wire;
  std::memcpy(&wire, &handle, sizeof wire);
  if (wire.magic != kIpcMemMagic || wire.size == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (wire.exporter == g.self) return CUDA_ERROR_INVALID_CONTEXT;  // as the real driver: not in the exporter
  std::lock_guard<std::mutex> lock(g.mu);
  for (auto& [base, b] : g.blocks) {
    if (b->kind == Block::kIpc && b->ctx == ctx && b->ipc_owner == wire.exporter && b->ipc_id == wire.id) {
      ++b->ipc_refs;
      *pdptr = b->base;
      return CUDA_SUCCESS;
    }
  }
  Device* d = device_by_uuid(wire.uuid);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  if (!process_alive(wire.exporter)) return CUDA_ERROR_INVALID_HANDLE;
  const std::string path = "/proc/" + std::to_string(wire.pid) + "/fd/" + std::to_string(wire.fd);
  const std::string expected = "/memfd:" + memfd_name(wire.pid, wire.id, d->cfg.uuid_text);
  if (fd_target(path).compare(0, expected.size(), expected) != 0) return CUDA_ERROR_INVALID_HANDLE;
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_INVALID_HANDLE;
  struct stat st;
  if (fd_target("/proc/self/fd/" + std::to_string(fd)).compare(0, expected.size(), expected) != 0 ||
      fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < wire.size) {
    close(fd);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  size_t mapped = round_up(wire.size, page_size());
  void* p = map_fd(fd, mapped, false);
  close(fd);  // the mapping keeps the memory
  if (!p) return CUDA_ERROR_MAP_FAILED;
  auto* b = new Block;
  b->kind = Block::kIpc;
  b->base = reinterpret_cast<uintptr_t>(p);
  b->size = wire.size;
  b->mapped = mapped;
  b->device = d;
  b->ctx = ctx;
  b->ipc_refs = 1;
  b->ipc_owner = wire.exporter;
  b->ipc_id = wire.id;
  g.blocks[b->base] = b;
  *pdptr = b->base;
  return CUDA_SUCCESS;
}

CUresult cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  return cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  REQUIRE_INIT();
  std::lock_guard<std::mutex> lock(g.mu);
  auto it = g.blocks.find(dptr);
  if (it == g.blocks.end() || it->second->kind != Block::kIpc) return CUDA_ERROR_INVALID_VALUE;
  if (--it->second->ipc_refs == 0) release_block(it->second, true);
  return CUDA_SUCCESS;
}

}  // extern "C"
