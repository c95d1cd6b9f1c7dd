// CUDA IPC between processes: a memory or event handle exported by one tenant opens only in the same
// tenant. Every export made through the library is registered (a digest of the handle) in the
// exporting tenant's region; an open looks the handle up in its own tenant's region first (the
// common, allowed case), else it is refused with CUDA_ERROR_NOT_PERMITTED and logged, naming the
// tenant that exported it when another tenant on the node registered it. A handle nobody registered
// (a process without the library) is refused too: the library cannot tell whose it is.
#include <dirent.h>

#include <cstdio>
#include <cstring>

#include "vgpu/hooks.h"
#include "vgpu/library.h"

using namespace cnlab::vgpu;
using cu::CUresult;

namespace cnlab::vgpu {

void register_export(uint64_t a, uint64_t b) { add_export(lib().tenant, a, b); }

ExportOwner export_owner(uint64_t a, uint64_t b, char* exporter) {
  Library& l = lib();
  if (has_export(l.tenant, a, b)) return ExportOwner::kThisTenant;
  // Who else? Read the other tenants' regions (read-only; our own file is never opened again, since
  // closing a second descriptor of it would drop this process's slot lock).
  char dir[600];
  std::snprintf(dir, sizeof dir, "%s/tenants", l.config.dir);
  DIR* d = ::opendir(dir);
  if (!d) return ExportOwner::kUnknown;
  ExportOwner owner = ExportOwner::kUnknown;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.' || std::strcmp(e->d_name, l.config.tenant) == 0) continue;
    char path[900];
    std::snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    Mapped<TenantRegion> other;
    if (open_tenant_readonly(path, &other) != RegionError::kOk) continue;
    bool theirs = has_export(other.region, a, b);
    if (theirs) std::snprintf(exporter, kIdSize, "%s", other.region->id);
    unmap(&other);
    if (theirs) {
      owner = ExportOwner::kOtherTenant;
      break;
    }
  }
  ::closedir(d);
  return owner;
}

void refuse_ipc(const char* call, const char* exporter) {
  Library& l = lib();
  l.tenant->ipc_refusals.fetch_add(1, std::memory_order_relaxed);
  if (!should_log(l.ipc_logged)) return;
  if (exporter && *exporter) {
    log_line(LogLevel::kError, "refused %s: the handle was exported by tenant \"%s\", not by tenant \"%s\"", call, exporter,
             l.config.tenant);
  } else {
    log_line(LogLevel::kError, "refused %s: the handle was not exported by tenant \"%s\"", call, l.config.tenant);
  }
}

}  // namespace cnlab::vgpu

namespace {

// After a successful export, the handle registered in this tenant's region.
template <typename Handle>
CUresult registered(CUresult r, const Handle* handle) {
  if (r == cu::CUDA_SUCCESS && handle) {
    uint64_t a, b;
    digest_bytes(handle, sizeof *handle, &a, &b);
    register_export(a, b);
  }
  return r;
}

template <typename Handle>
bool opens_here(const Handle& handle, const char* call) {
  uint64_t a, b;
  digest_bytes(&handle, sizeof handle, &a, &b);
  char exporter[kIdSize] = {};
  ExportOwner owner = export_owner(a, b, exporter);
  if (owner == ExportOwner::kThisTenant) return true;
  refuse_ipc(call, exporter);
  return false;
}

}  // namespace

extern "C" {

CUresult cuIpcGetMemHandle(cu::CUipcMemHandle* handle, cu::CUdeviceptr dptr) {
  CNLAB_VGPU_ENTER();
  return registered(lib().cuda.cuIpcGetMemHandle(handle, dptr), handle);
}

CUresult cuIpcOpenMemHandle_v2(cu::CUdeviceptr* dptr, cu::CUipcMemHandle handle, unsigned int flags) {
  CNLAB_VGPU_ENTER();
  if (!opens_here(handle, "cuIpcOpenMemHandle")) return cu::CUDA_ERROR_NOT_PERMITTED;
  return lib().cuda.cuIpcOpenMemHandle_v2(dptr, handle, flags);
}

CUresult cuIpcOpenMemHandle(cu::CUdeviceptr* dptr, cu::CUipcMemHandle handle, unsigned int flags) {
  CNLAB_VGPU_ENTER();
  if (!opens_here(handle, "cuIpcOpenMemHandle")) return cu::CUDA_ERROR_NOT_PERMITTED;
  Library& l = lib();
  return l.cuda.cuIpcOpenMemHandle ? l.cuda.cuIpcOpenMemHandle(dptr, handle, flags)
                                   : l.cuda.cuIpcOpenMemHandle_v2(dptr, handle, flags);
}

CUresult cuIpcGetEventHandle(cu::CUipcEventHandle* handle, cu::CUevent event) {
  CNLAB_VGPU_ENTER();
  return registered(lib().cuda.cuIpcGetEventHandle(handle, event), handle);
}

CUresult cuIpcOpenEventHandle(cu::CUevent* event, cu::CUipcEventHandle handle) {
  CNLAB_VGPU_ENTER();
  if (!opens_here(handle, "cuIpcOpenEventHandle")) return cu::CUDA_ERROR_NOT_PERMITTED;
  return lib().cuda.cuIpcOpenEventHandle(event, handle);
}

}  // extern "C"
