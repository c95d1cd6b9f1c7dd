#include "vgpu/alloc_table.h"

#include <pthread.h>
#include <sys/mman.h>

#include <cstdlib>

namespace cnlab::vgpu {

// Entries that found no slot within kMaxProbe: a plain list under a mutex (never expected in
// practice; there so that a pathological fill degrades instead of failing).
struct AllocTable::Overflow {
  pthread_mutex_t mutex;
  struct Entry {
    uint64_t key;
    uint64_t value;
  };
  Entry* entries;
  size_t count;
  size_t capacity;
};

AllocTable::AllocTable() {
  void* at = ::mmap(nullptr, kSlots * sizeof(Slot), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                    -1, 0);
  if (at == MAP_FAILED) std::abort();  // 16 MiB of address space: without it nothing else would work
  slots_ = static_cast<Slot*>(at);      // zero-filled: every key empty
  ::madvise(at, kSlots * sizeof(Slot), MADV_HUGEPAGE);  // fewer TLB misses where the kernel allows
  overflow_ = static_cast<Overflow*>(std::calloc(1, sizeof(Overflow)));
  if (!overflow_) std::abort();
  pthread_mutex_init(&overflow_->mutex, nullptr);
}

AllocTable::~AllocTable() {
  ::munmap(slots_, kSlots * sizeof(Slot));
  std::free(overflow_->entries);
  pthread_mutex_destroy(&overflow_->mutex);
  std::free(overflow_);
}

// Kinds in the top 4 bits: real handles (addresses below 2^57, small integers) never differ from
// each other only there, so (kind, handle) pairs map to distinct keys.
uint64_t AllocTable::key_of(AllocKind kind, uint64_t handle) { return handle ^ (uint64_t(kind) << 60); }

uint64_t AllocTable::pack(AllocInfo info) { return info.bytes << 8 | static_cast<uint8_t>(info.gpu); }

AllocInfo AllocTable::unpack(uint64_t value) {
  return {value >> 8, static_cast<int>(value & 0xff)};
}

namespace {
// By address, in 512-byte steps (the driver's smallest alignment): consecutive allocations land in
// consecutive slots and a reused address in its old slot, so the table is walked, not scattered
// over (a random slot per allocation costs a cache and TLB miss each, ~200 ns measured).
inline uint64_t slot_of(uint64_t key) { return (key >> 9) & ((uint64_t{1} << 20) - 1); }
}  // namespace

void AllocTable::insert(AllocKind kind, uint64_t handle, AllocInfo info) {
  const uint64_t key = key_of(kind, handle);
  const uint64_t value = pack(info);
  if (key != 0 && key != kTombstone && key != kBusy) {
    uint64_t at = slot_of(key);
    for (int probe = 0; probe < kMaxProbe; ++probe, at = (at + 1) & (kSlots - 1)) {
      Slot& s = slots_[at];
      uint64_t seen = s.key.load(std::memory_order_acquire);
      if (seen != 0 && seen != kTombstone) continue;
      // Reserve the slot (busy), write the value, then publish the key with release: a reader that
      // sees the key sees the value. Two inserters cannot both win the slot; the loser probes on.
      if (s.key.compare_exchange_strong(seen, kBusy, std::memory_order_acq_rel)) {
        s.value.store(value, std::memory_order_relaxed);
        s.key.store(key, std::memory_order_release);
        return;
      }
    }
  }
  pthread_mutex_lock(&overflow_->mutex);
  if (overflow_->count == overflow_->capacity) {
    size_t capacity = overflow_->capacity ? overflow_->capacity * 2 : 64;
    void* grown = std::realloc(overflow_->entries, capacity * sizeof(Overflow::Entry));
    if (!grown) std::abort();
    overflow_->entries = static_cast<Overflow::Entry*>(grown);
    overflow_->capacity = capacity;
  }
  overflow_->entries[overflow_->count++] = {key, value};
  pthread_mutex_unlock(&overflow_->mutex);
}

bool AllocTable::remove(AllocKind kind, uint64_t handle, AllocInfo* info) {
  const uint64_t key = key_of(kind, handle);
  if (key != 0 && key != kTombstone && key != kBusy) {
    uint64_t at = slot_of(key);
    for (int probe = 0; probe < kMaxProbe; ++probe, at = (at + 1) & (kSlots - 1)) {
      Slot& s = slots_[at];
      uint64_t seen = s.key.load(std::memory_order_acquire);
      if (seen == 0) break;
      if (seen != key) continue;
      uint64_t value = s.value.load(std::memory_order_relaxed);
      if (s.key.compare_exchange_strong(seen, kTombstone, std::memory_order_acq_rel)) {
        if (info) *info = unpack(value);
        return true;
      }
      return false;  // a concurrent free of the same handle won: the caller's free is a double free
    }
  }
  pthread_mutex_lock(&overflow_->mutex);
  bool found = false;
  for (size_t i = 0; i < overflow_->count; ++i) {
    if (overflow_->entries[i].key != key) continue;
    if (info) *info = unpack(overflow_->entries[i].value);
    overflow_->entries[i] = overflow_->entries[--overflow_->count];
    found = true;
    break;
  }
  pthread_mutex_unlock(&overflow_->mutex);
  return found;
}

bool AllocTable::find(AllocKind kind, uint64_t handle, AllocInfo* info) const {
  const uint64_t key = key_of(kind, handle);
  if (key != 0 && key != kTombstone && key != kBusy) {
    uint64_t at = slot_of(key);
    for (int probe = 0; probe < kMaxProbe; ++probe, at = (at + 1) & (kSlots - 1)) {
      const Slot& s = slots_[at];
      uint64_t seen = s.key.load(std::memory_order_acquire);
      if (seen == 0) break;
      if (seen != key) continue;
      if (info) *info = unpack(s.value.load(std::memory_order_relaxed));
      return true;
    }
  }
  pthread_mutex_lock(&overflow_->mutex);
  bool found = false;
  for (size_t i = 0; i < overflow_->count; ++i) {
    if (overflow_->entries[i].key != key) continue;
    if (info) *info = unpack(overflow_->entries[i].value);
    found = true;
    break;
  }
  pthread_mutex_unlock(&overflow_->mutex);
  return found;
}

uint64_t AllocTable::size() const {
  uint64_t n = 0;
  for (uint64_t i = 0; i < kSlots; ++i) {
    uint64_t k = slots_[i].key.load(std::memory_order_relaxed);
    n += k != 0 && k != kTombstone && k != kBusy;
  }
  pthread_mutex_lock(&overflow_->mutex);
  n += overflow_->count;
  pthread_mutex_unlock(&overflow_->mutex);
  return n;
}

}  // namespace cnlab::vgpu
