// What each live allocation of this process was charged: device pointer (or array, mipmapped array,
// VMM handle) -> bytes and GPU, so that a free uncharges exactly what its allocation charged.
//
// A lock-free open-addressing table (linear probing, 2^20 slots of 16 bytes, in anonymous memory the
// kernel backs only where touched). Keys are unique while live: the driver never hands out an
// address again before it was freed, and a free removes its key before the driver's free is called,
// so an insert may reuse the first tombstone on its probe path without ever duplicating a key.
// Past `kMaxProbe` slots (a pathological fill) entries go to a mutex-guarded overflow list, off the
// hot path. Libc only (compiled into the interception library).
#pragma once

#include <atomic>
#include <cstdint>

namespace cnlab::vgpu {

// What kind of handle a key is; part of the key, since a VMM handle's number may equal a pointer.
enum class AllocKind : uint8_t { kDevicePtr = 1, kPitched = 2, kArray = 3, kMipmap = 4, kVmmHandle = 5, kImported = 6 };

struct AllocInfo {
  uint64_t bytes = 0;
  int gpu = -1;
};

class AllocTable {
 public:
  AllocTable();
  ~AllocTable();
  AllocTable(const AllocTable&) = delete;
  AllocTable& operator=(const AllocTable&) = delete;

  // Records `handle` of `kind`. The handle must not be present.
  void insert(AllocKind kind, uint64_t handle, AllocInfo info);
  // Removes `handle` and returns what it recorded; false when it was not there.
  bool remove(AllocKind kind, uint64_t handle, AllocInfo* info);
  // Reads without removing.
  bool find(AllocKind kind, uint64_t handle, AllocInfo* info) const;
  // Live entries, by a scan of the whole table (tests; not exact under concurrent change). No
  // counter is kept: a shared one would be written by every thread's every allocation.
  uint64_t size() const;

 private:
  struct Slot {
    std::atomic<uint64_t> key;    // 0 empty, kTombstone removed, kBusy being filled, else the key
    std::atomic<uint64_t> value;  // bytes << 8 | gpu
  };
  static constexpr uint64_t kTombstone = ~uint64_t{0};
  static constexpr uint64_t kBusy = ~uint64_t{1};  // being filled by an insert
  static constexpr uint64_t kSlots = uint64_t{1} << 20;
  static constexpr int kMaxProbe = 128;

  static uint64_t key_of(AllocKind kind, uint64_t handle);
  static uint64_t pack(AllocInfo info);
  static AllocInfo unpack(uint64_t value);

  Slot* slots_ = nullptr;
  struct Overflow;
  Overflow* overflow_ = nullptr;
};

}  // namespace cnlab::vgpu
