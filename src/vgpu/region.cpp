#include "vgpu/region.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

namespace cnlab::vgpu {
namespace {

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared counters must be lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared counters must be lock-free");
static_assert(std::atomic<int32_t>::is_always_lock_free, "shared counters must be lock-free");
static_assert(kMaxProcs <= 64, "active_procs is one 64-bit mask");

// The byte of the tenant file whose record lock marks slot `slot` as held: past the region, so that
// the locks never overlap anything a reader cares about.
off_t slot_lock_offset(int slot) { return static_cast<off_t>(sizeof(TenantRegion)) + slot; }

// `cmd`: F_OFD_SETLK or F_OFD_GETLK (open file description locks: region.h says why).
bool lock_byte(int fd, off_t at, short type, int cmd) {
  struct flock lock {};  // l_pid 0, as OFD locks require
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  lock.l_start = at;
  lock.l_len = 1;
  return ::fcntl(fd, cmd, &lock) == 0;
}

template <typename T>
RegionError map_fd(int fd, bool writable, uint32_t magic, Mapped<T>* out) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return RegionError::kIo;
  if (static_cast<size_t>(st.st_size) < sizeof(T)) return RegionError::kTooSmall;
  void* at = ::mmap(nullptr, sizeof(T), writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  if (at == MAP_FAILED) return RegionError::kIo;
  T* region = static_cast<T*>(at);
  if (__atomic_load_n(&region->magic, __ATOMIC_ACQUIRE) != magic) {
    ::munmap(at, sizeof(T));
    return RegionError::kBadMagic;
  }
  if (region->version != kRegionVersion || region->size != sizeof(T)) {
    ::munmap(at, sizeof(T));
    return RegionError::kBadVersion;
  }
  out->region = region;
  out->fd = fd;
  return RegionError::kOk;
}

// Creates or opens `path`; initialises it once (under an exclusive flock) when it is new or empty.
template <typename T, typename Init>
RegionError create_or_open(const char* path, unsigned mode, uint32_t magic, Init init, Mapped<T>* out) {
  int fd = ::open(path, O_RDWR | O_CREAT | O_CLOEXEC, mode);
  if (fd < 0) return errno == ENOENT ? RegionError::kMissing : RegionError::kIo;
  if (::flock(fd, LOCK_EX) != 0) {
    ::close(fd);
    return RegionError::kIo;
  }
  struct stat st {};
  RegionError result = RegionError::kOk;
  if (::fstat(fd, &st) != 0) {
    result = RegionError::kIo;
  } else if (st.st_size == 0) {
    // New: size it (zero-filled by the kernel), then write the header last.
    if (::ftruncate(fd, static_cast<off_t>(sizeof(T))) != 0) {
      result = RegionError::kIo;
    } else {
      void* at = ::mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (at == MAP_FAILED) {
        result = RegionError::kIo;
      } else {
        T* region = static_cast<T*>(at);
        init(region);
        region->size = sizeof(T);
        region->version = kRegionVersion;
        // The magic last, with release: a reader that sees it sees the rest written.
        __atomic_store_n(&region->magic, magic, __ATOMIC_RELEASE);
        ::munmap(at, sizeof(T));
      }
    }
  }
  if (result == RegionError::kOk) (void)::fchmod(fd, mode);  // the umask must not narrow who may map it
  ::flock(fd, LOCK_UN);
  if (result == RegionError::kOk) result = map_fd(fd, true, magic, out);
  if (result != RegionError::kOk) ::close(fd);
  return result;
}

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// The part of a UUID text after its "GPU-"/"MIG-" prefix.
const char* uuid_digits(const char* uuid) {
  const char* dash = std::strchr(uuid, '-');
  return dash ? dash + 1 : uuid;
}

bool same_uuid(const char* a, const char* b) {
  a = uuid_digits(a);
  b = uuid_digits(b);
  while (*a && *b) {
    if (lower(*a) != lower(*b)) return false;
    ++a;
    ++b;
  }
  return *a == *b;
}

void copy_text(char* to, const char* from, size_t size) {
  size_t n = std::strlen(from);
  if (n >= size) n = size - 1;
  std::memcpy(to, from, n);
  to[n] = '\0';
}

}  // namespace

const char* region_error_text(RegionError e) {
  switch (e) {
    case RegionError::kOk: return "ok";
    case RegionError::kMissing: return "the file does not exist";
    case RegionError::kIo: return "the file could not be opened or mapped";
    case RegionError::kBadMagic: return "the file is not a CNLab vGPU region";
    case RegionError::kBadVersion: return "the region was written by another version of CNLab";
    case RegionError::kTooSmall: return "the file is shorter than a region";
    case RegionError::kFull: return "the region is full";
    case RegionError::kNotFound: return "the tenant is not in the region";
  }
  return "unknown";
}

RegionError open_limits(const char* path, bool writable, Mapped<LimitsRegion>* out) {
  int fd = ::open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? RegionError::kMissing : RegionError::kIo;
  RegionError e = map_fd(fd, writable, kLimitsMagic, out);
  if (e != RegionError::kOk) ::close(fd);
  return e;
}

RegionError create_limits(const char* path, unsigned mode, Mapped<LimitsRegion>* out) {
  return create_or_open<LimitsRegion>(path, mode, kLimitsMagic, [](LimitsRegion*) {}, out);
}

RegionError open_tenant(const char* path, bool create, unsigned mode, const char* tenant_id, Mapped<TenantRegion>* out) {
  if (!create) {
    int fd = ::open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? RegionError::kMissing : RegionError::kIo;
    RegionError e = map_fd(fd, true, kTenantMagic, out);
    if (e != RegionError::kOk) ::close(fd);
    return e;
  }
  return create_or_open<TenantRegion>(
      path, mode, kTenantMagic, [&](TenantRegion* r) { copy_text(r->id, tenant_id, kIdSize); }, out);
}

RegionError open_tenant_readonly(const char* path, Mapped<TenantRegion>* out) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? RegionError::kMissing : RegionError::kIo;
  RegionError e = map_fd(fd, false, kTenantMagic, out);
  if (e != RegionError::kOk) ::close(fd);
  return e;
}

template <typename T>
void unmap(Mapped<T>* m) {
  if (m->region) ::munmap(m->region, sizeof(T));
  if (m->fd >= 0) ::close(m->fd);
  m->region = nullptr;
  m->fd = -1;
}
template void unmap<LimitsRegion>(Mapped<LimitsRegion>*);
template void unmap<TenantRegion>(Mapped<TenantRegion>*);

int find_gpu(const GpuEntry* gpus, uint32_t count, const char* uuid) {
  if (count > static_cast<uint32_t>(kMaxGpus)) count = kMaxGpus;
  for (uint32_t i = 0; i < count; ++i) {
    if (gpus[i].state.load(std::memory_order_acquire) == 2 && same_uuid(gpus[i].uuid, uuid)) return static_cast<int>(i);
  }
  return -1;
}

int find_or_add_gpu(TenantRegion* r, const char* uuid, uint64_t total_bytes) {
  for (int i = 0; i < kMaxGpus; ++i) {
    GpuEntry& g = r->gpus[i];
    uint32_t state = g.state.load(std::memory_order_acquire);
    if (state == 0) {
      uint32_t expected = 0;
      if (g.state.compare_exchange_strong(expected, 1)) {
        copy_text(g.uuid, uuid, kUuidSize);
        g.node_index = static_cast<uint32_t>(i);
        g.total_bytes.store(total_bytes);
        g.state.store(2, std::memory_order_release);
        uint32_t count = r->gpu_count.load();
        while (count < static_cast<uint32_t>(i + 1) && !r->gpu_count.compare_exchange_weak(count, i + 1)) {
        }
        return i;
      }
      state = expected;
    }
    // Another process is writing this entry: wait for it (a few stores away).
    while (state == 1) state = g.state.load(std::memory_order_acquire);
    if (same_uuid(g.uuid, uuid)) return i;
  }
  return -1;
}

void set_gpu(GpuEntry* gpus, std::atomic<uint32_t>* count, int index, uint32_t node_index, const char* uuid,
             uint64_t total_bytes) {
  GpuEntry& g = gpus[index];
  g.state.store(1);
  g.node_index = node_index;
  copy_text(g.uuid, uuid, kUuidSize);
  g.total_bytes.store(total_bytes);
  g.state.store(2, std::memory_order_release);
  if (count->load() < static_cast<uint32_t>(index + 1)) count->store(index + 1);
}

LimitsRegion::Tenant* find_tenant(LimitsRegion* r, const char* id) {
  for (auto& t : r->tenants) {
    if (t.state.load(std::memory_order_acquire) == 2 && std::strncmp(t.id, id, kIdSize) == 0) return &t;
  }
  return nullptr;
}

LimitsRegion::Tenant* add_tenant(LimitsRegion* r, const char* id) {
  if (auto* t = find_tenant(r, id)) return t;
  for (auto& t : r->tenants) {
    uint32_t expected = 0;
    if (!t.state.compare_exchange_strong(expected, 1)) continue;
    copy_text(t.id, id, kIdSize);
    for (int g = 0; g < kMaxGpus; ++g) {
      t.limits.memory_limit[g].store(0);
      t.limits.memory_quota[g].store(0);
      t.limits.compute_share[g].store(100);
      t.limits.launch_interval_ns[g].store(0);
    }
    t.limits.flags.store(0);
    t.state.store(2, std::memory_order_release);
    return &t;
  }
  return nullptr;
}

void remove_tenant(LimitsRegion* r, const char* id) {
  if (auto* t = find_tenant(r, id)) {
    t->state.store(1);
    std::memset(t->id, 0, kIdSize);
    t->state.store(0, std::memory_order_release);
  }
}

int claim_proc_slot(TenantRegion* r, int fd, int32_t pid, uint64_t start_ticks) {
  for (int slot = 0; slot < kMaxProcs; ++slot) {
    // The lock first: whoever holds it owns the slot, so a slot is never claimed twice and a claimed
    // slot with a free lock can only be a dead process's.
    if (!lock_byte(fd, slot_lock_offset(slot), F_WRLCK, F_OFD_SETLK)) continue;
    ProcSlot& p = r->procs[slot];
    // A predecessor that died left its usage: the driver freed that memory with the process.
    for (int g = 0; g < kMaxGpus; ++g) r->usage[g][slot].store(0);
    p.pid.store(pid);
    p.start_ticks.store(start_ticks);
    p.host_pid.store(0);
    p.state.store(1);
    r->active_procs.fetch_or(uint64_t{1} << slot);
    return slot;
  }
  return -1;
}

void release_proc_slot(TenantRegion* r, int fd, int slot) {
  if (slot < 0 || slot >= kMaxProcs) return;
  r->active_procs.fetch_and(~(uint64_t{1} << slot));
  for (int g = 0; g < kMaxGpus; ++g) r->usage[g][slot].store(0);
  r->procs[slot].state.store(0);
  lock_byte(fd, slot_lock_offset(slot), F_UNLCK, F_OFD_SETLK);
}

bool proc_alive(int fd, int slot) {
  struct flock probe {};
  probe.l_type = F_WRLCK;
  probe.l_whence = SEEK_SET;
  probe.l_start = slot_lock_offset(slot);
  probe.l_len = 1;
  if (::fcntl(fd, F_OFD_GETLK, &probe) != 0) return true;  // cannot tell: assume alive
  return probe.l_type != F_UNLCK;
}

bool try_lock_controller(int fd) { return lock_byte(fd, slot_lock_offset(kMaxProcs), F_WRLCK, F_OFD_SETLK); }

int reap_dead_procs(TenantRegion* r, int fd, int own_slot) {
  int reaped = 0;
  uint64_t active = r->active_procs.load();
  for (int slot = 0; slot < kMaxProcs; ++slot) {
    // Our own slot's lock is ours already (held through this very descriptor): taking it again
    // would succeed and unlocking it would drop it.
    if (slot == own_slot || !(active & (uint64_t{1} << slot))) continue;
    // Taking the lock proves the owner is gone (a lock held through this descriptor would not show
    // as a conflict, so take it rather than ask).
    if (!lock_byte(fd, slot_lock_offset(slot), F_WRLCK, F_OFD_SETLK)) continue;
    // Still claimed by someone else? A live claimer holds the lock, so we could not have taken it.
    if (r->procs[slot].state.load() == 1 && (r->active_procs.load() & (uint64_t{1} << slot))) {
      r->active_procs.fetch_and(~(uint64_t{1} << slot));
      for (int g = 0; g < kMaxGpus; ++g) r->usage[g][slot].store(0);
      r->procs[slot].state.store(0);
      ++reaped;
    }
    lock_byte(fd, slot_lock_offset(slot), F_UNLCK, F_OFD_SETLK);
  }
  return reaped;
}

uint64_t tenant_usage(const TenantRegion* r, int gpu) {
  uint64_t active = r->active_procs.load();
  uint64_t sum = 0;
  while (active) {
    int slot = __builtin_ctzll(active);
    active &= active - 1;
    sum += r->usage[gpu][slot].load();
  }
  return sum;
}

bool try_charge(TenantRegion* r, int gpu, int slot, uint64_t bytes, uint64_t limit) {
  if (limit == kUnlimited) {
    r->usage[gpu][slot].fetch_add(bytes);
    return true;
  }
  uint64_t before = tenant_usage(r, gpu);
  if (before > limit || bytes > limit - before) return false;
  r->usage[gpu][slot].fetch_add(bytes);
  uint64_t after = tenant_usage(r, gpu);
  if (after > limit) {
    uncharge(r, gpu, slot, bytes);
    return false;
  }
  uint64_t peak = r->peak_usage[gpu].load(std::memory_order_relaxed);
  while (after > peak && !r->peak_usage[gpu].compare_exchange_weak(peak, after, std::memory_order_relaxed)) {
  }
  return true;
}

void uncharge(TenantRegion* r, int gpu, int slot, uint64_t bytes) {
  auto& counter = r->usage[gpu][slot];
  uint64_t held = counter.load();
  while (!counter.compare_exchange_weak(held, held >= bytes ? held - bytes : 0)) {
  }
}

void digest_bytes(const void* data, size_t size, uint64_t* a, uint64_t* b) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h1 = 0xcbf29ce484222325ull, h2 = 0x84222325cbf29ce4ull;
  for (size_t i = 0; i < size; ++i) {
    h1 = (h1 ^ p[i]) * 0x100000001b3ull;
    h2 = (h2 ^ p[size - 1 - i]) * 0x100000001b3ull;
  }
  *a = h1 | 1;  // never both zero (zero marks an empty entry)
  *b = h2;
}

void add_export(TenantRegion* r, uint64_t a, uint64_t b) {
  if (has_export(r, a, b)) return;
  uint32_t at = r->export_next.fetch_add(1) % kMaxExports;
  r->exports[at].a.store(0);
  r->exports[at].b.store(b);
  r->exports[at].a.store(a);
}

bool has_export(const TenantRegion* r, uint64_t a, uint64_t b) {
  for (const auto& e : r->exports) {
    if (e.a.load() == a && e.b.load() == b) return true;
  }
  return false;
}

}  // namespace cnlab::vgpu
