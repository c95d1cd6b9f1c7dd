// The virtual memory management API: physical memory made with cuMemCreate or imported from another
// process's shareable handle, mapped with cuMemMap. Physical memory lives until its handle is
// released *and* its last mapping is gone (a common pattern releases the handle right after mapping
// it), so a handle is uncharged only then.
//
// Imported handles: one exported by another process of the same tenant is already charged to the
// tenant (by its exporter) and is not charged again; one exported by another tenant is refused
// (CUDA_ERROR_NOT_PERMITTED), like CUDA IPC; one whose exporter is unknown (a process without this
// library) is charged to the importer when first mapped, for the size mapped.
//
// These calls are rare beside allocations and launches, so their records sit under one mutex.
#include <pthread.h>
#include <sys/stat.h>

#include "vgpu/hooks.h"
#include "vgpu/library.h"

using namespace cnlab::vgpu;
using cu::CUresult;

namespace {

struct Record {
  uint64_t handle = 0;
  uint64_t bytes = 0;   // charged (0 for a same-tenant import, and for an unknown import until mapped)
  int gpu = -1;
  int maps = 0;
  bool used = false;    // slot in use
  bool released = false;
  bool charge_on_map = false;  // an import from an unknown exporter, not yet charged
};

// Open addressing under g_mutex; 2^16 live handles (PyTorch's expandable segments map 2 MiB pages,
// so 128 GiB of them) before inserts fail over to charging-only (logged).
constexpr size_t kRecords = size_t{1} << 16;
Record g_records[kRecords];
struct Mapping {
  uint64_t ptr = 0;
  uint64_t handle = 0;
  bool used = false;
};
Mapping g_mappings[kRecords];
pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;

size_t home(uint64_t key) { return (key * 0x9E3779B97F4A7C15ull) >> 48; }

template <typename T, typename Match>
T* find_slot(T* table, uint64_t key, Match match, bool for_insert) {
  size_t at = home(key);
  T* free_slot = nullptr;
  for (size_t probe = 0; probe < kRecords; ++probe, at = (at + 1) & (kRecords - 1)) {
    T& slot = table[at];
    if (!slot.used) {
      if (for_insert) return free_slot ? free_slot : &slot;
      // Removal leaves holes marked unused; keep probing a little past them for lookups.
      if (!free_slot) free_slot = &slot;
      if (probe > 64) break;
      continue;
    }
    if (match(slot)) return &slot;
  }
  return for_insert ? free_slot : nullptr;
}

Record* find_record(uint64_t handle, bool insert) {
  return find_slot(g_records, handle, [&](const Record& r) { return r.handle == handle; }, insert);
}
Mapping* find_mapping(uint64_t ptr, bool insert) {
  return find_slot(g_mappings, ptr, [&](const Mapping& m) { return m.ptr == ptr; }, insert);
}

// Drops a record whose memory is gone (released, nothing mapped), uncharging it. Under g_mutex.
void forget_if_gone(Record* r) {
  if (!r->released || r->maps > 0) return;
  if (r->bytes && r->gpu >= 0) uncharge(r->gpu, r->bytes);
  *r = Record{};
}

// The export key of a shareable handle: (device, inode) of a file descriptor, a digest of a fabric
// handle's bytes. False when it has none we can compute.
bool export_key(const void* shareable, cu::CUmemAllocationHandleType type, bool is_fd_value, uint64_t* a, uint64_t* b) {
  if (type == cu::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    int fd = is_fd_value ? static_cast<int>(reinterpret_cast<intptr_t>(shareable)) : *static_cast<const int*>(shareable);
    struct stat st {};
    if (::fstat(fd, &st) != 0) return false;
    uint64_t id[2] = {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
    digest_bytes(id, sizeof id, a, b);
    return true;
  }
  if (type == cu::CU_MEM_HANDLE_TYPE_FABRIC) {
    digest_bytes(shareable, sizeof(cu::CUmemFabricHandle), a, b);
    return true;
  }
  return false;
}

int gpu_of_prop(const cu::CUmemAllocationProp* prop) {
  if (prop && prop->location.type == cu::CU_MEM_LOCATION_TYPE_DEVICE) return gpu_of_device(prop->location.id);
  return current_gpu();
}

}  // namespace

extern "C" {

CUresult cuMemCreate(cu::CUmemGenericAllocationHandle* handle, size_t size, const cu::CUmemAllocationProp* prop,
                     unsigned long long flags) {
  CNLAB_VGPU_ENTER();
  Library& l = lib();
  if (!handle || !prop) return l.cuda.cuMemCreate(handle, size, prop, flags);
  int gpu = gpu_of_prop(prop);
  if (gpu == -2) return cu::CUDA_ERROR_OUT_OF_MEMORY;
  if (gpu >= 0 && !charge(gpu, size, "cuMemCreate")) return cu::CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = l.cuda.cuMemCreate(handle, size, prop, flags);
  if (r != cu::CUDA_SUCCESS) {
    if (gpu >= 0) uncharge(gpu, size);
    return r;
  }
  pthread_mutex_lock(&g_mutex);
  if (Record* rec = find_record(*handle, true)) {
    *rec = Record{*handle, gpu >= 0 ? size : 0, gpu, 0, true, false, false};
  } else if (gpu >= 0) {
    log_line(LogLevel::kError, "more than %zu VMM handles: handle %llu stays charged until the process exits", kRecords,
             static_cast<unsigned long long>(*handle));
  }
  pthread_mutex_unlock(&g_mutex);
  return r;
}

CUresult cuMemRelease(cu::CUmemGenericAllocationHandle handle) {
  CNLAB_VGPU_ENTER();
  CUresult r = lib().cuda.cuMemRelease(handle);
  if (r != cu::CUDA_SUCCESS) return r;
  pthread_mutex_lock(&g_mutex);
  if (Record* rec = find_record(handle, false)) {
    rec->released = true;
    forget_if_gone(rec);
  }
  pthread_mutex_unlock(&g_mutex);
  return r;
}

CUresult cuMemMap(cu::CUdeviceptr ptr, size_t size, size_t offset, cu::CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  CNLAB_VGPU_ENTER();
  Library& l = lib();
  pthread_mutex_lock(&g_mutex);
  Record* rec = find_record(handle, false);
  bool charged_now = false;
  if (rec && rec->charge_on_map) {
    int gpu = current_gpu();
    if (gpu == -2 || (gpu >= 0 && !charge(gpu, size, "cuMemMap"))) {
      pthread_mutex_unlock(&g_mutex);
      return cu::CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (gpu >= 0) {
      rec->gpu = gpu;
      rec->bytes = size;
      charged_now = true;
    }
    rec->charge_on_map = false;
  }
  CUresult r = l.cuda.cuMemMap(ptr, size, offset, handle, flags);
  if (r != cu::CUDA_SUCCESS) {
    if (charged_now) {
      uncharge(rec->gpu, rec->bytes);
      rec->bytes = 0;
      rec->charge_on_map = true;
    }
  } else if (rec) {
    ++rec->maps;
    if (Mapping* m = find_mapping(ptr, true)) *m = Mapping{ptr, handle, true};
  }
  pthread_mutex_unlock(&g_mutex);
  return r;
}

CUresult cuMemUnmap(cu::CUdeviceptr ptr, size_t size) {
  CNLAB_VGPU_ENTER();
  CUresult r = lib().cuda.cuMemUnmap(ptr, size);
  if (r != cu::CUDA_SUCCESS) return r;
  pthread_mutex_lock(&g_mutex);
  // Every mapping that starts inside the unmapped range is gone.
  for (Mapping& m : g_mappings) {
    if (!m.used || m.ptr < ptr || m.ptr >= ptr + size) continue;
    if (Record* rec = find_record(m.handle, false)) {
      if (rec->maps > 0) --rec->maps;
      forget_if_gone(rec);
    }
    m = Mapping{};
  }
  pthread_mutex_unlock(&g_mutex);
  return r;
}

CUresult cuMemExportToShareableHandle(void* shareable, cu::CUmemGenericAllocationHandle handle,
                                      cu::CUmemAllocationHandleType type, unsigned long long flags) {
  CNLAB_VGPU_ENTER();
  CUresult r = lib().cuda.cuMemExportToShareableHandle(shareable, handle, type, flags);
  uint64_t a, b;
  if (r == cu::CUDA_SUCCESS && shareable && export_key(shareable, type, /*is_fd_value=*/false, &a, &b)) {
    register_export(a, b);
  }
  return r;
}

CUresult cuMemImportFromShareableHandle(cu::CUmemGenericAllocationHandle* handle, void* os_handle,
                                        cu::CUmemAllocationHandleType type) {
  CNLAB_VGPU_ENTER();
  uint64_t a = 0, b = 0;
  char exporter[kIdSize] = {};
  ExportOwner owner = export_key(os_handle, type, /*is_fd_value=*/true, &a, &b) ? export_owner(a, b, exporter)
                                                                              : ExportOwner::kUnknown;
  if (owner == ExportOwner::kOtherTenant) {
    refuse_ipc("cuMemImportFromShareableHandle", exporter);
    return cu::CUDA_ERROR_NOT_PERMITTED;
  }
  const bool ours = owner == ExportOwner::kThisTenant;
  CUresult r = lib().cuda.cuMemImportFromShareableHandle(handle, os_handle, type);
  if (r != cu::CUDA_SUCCESS || !handle) return r;
  pthread_mutex_lock(&g_mutex);
  if (Record* rec = find_record(*handle, true)) {
    *rec = Record{*handle, 0, -1, 0, true, false, /*charge_on_map=*/!ours};
  }
  pthread_mutex_unlock(&g_mutex);
  return r;
}

}  // extern "C"
