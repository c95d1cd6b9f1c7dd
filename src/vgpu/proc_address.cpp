#include "vgpu/proc_address.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

#include "vgpu/hooks.h"
#include "vgpu/library.h"

using namespace cnlab::vgpu;

using DlsymFn = void*(void*, const char*);
// Read by the dlsym trampoline below: hidden, so that it is reached without the GOT.
extern "C" {
__attribute__((visibility("hidden"))) DlsymFn* cnlab_vgpu_real_dlsym = nullptr;
}
extern "C" __attribute__((visibility("hidden"))) int cnlab_vgpu_dlsym_filter(void* handle, const char* name, void** result);

namespace cnlab::vgpu {
namespace {

struct Entry {
  const char* abi;
  const char* base;
  int version;
  bool per_thread;
  void* hook;
  bool cuda;          // a CUDA entry (else NVML)
  size_t real_offset;  // where its real pointer lives in RealCuda / RealNvml
};

const Entry kEntries[] = {
#define CNLAB_CUDA_ENTRY(abi, base, version, per_thread, type) \
  {#abi, #base, version, per_thread != 0, reinterpret_cast<void*>(&::abi), true, offsetof(RealCuda, abi)},
    CNLAB_VGPU_CUDA_HOOKS(CNLAB_CUDA_ENTRY)
#undef CNLAB_CUDA_ENTRY
#define CNLAB_NVML_ENTRY(abi, type) {#abi, #abi, 0, false, reinterpret_cast<void*>(&::abi), false, offsetof(RealNvml, abi)},
    CNLAB_VGPU_NVML_HOOKS(CNLAB_NVML_ENTRY)
#undef CNLAB_NVML_ENTRY
};
constexpr size_t kEntryCount = sizeof kEntries / sizeof kEntries[0];

void*& real_slot(const Entry& e) {
  Library& l = lib();
  char* base = e.cuda ? reinterpret_cast<char*>(&l.cuda) : reinterpret_cast<char*>(&l.nvml);
  return *reinterpret_cast<void**>(base + e.real_offset);
}

// Real address -> entry, sorted by address. Rebuilt at most twice (driver, then NVML) into the
// buffer readers are not using, then published.
struct Index {
  size_t count = 0;
  struct Pair {
    const void* real;
    const Entry* entry;
  } pairs[kEntryCount];
};
Index g_indexes[2];
std::atomic<Index*> g_index{nullptr};
std::atomic<int> g_builds{0};

const Entry* entry_for_address(const void* real) {
  const Index* index = g_index.load(std::memory_order_acquire);
  if (!index || !real) return nullptr;
  auto* end = index->pairs + index->count;
  auto* it = std::lower_bound(index->pairs, end, real, [](const Index::Pair& p, const void* r) { return p.real < r; });
  return it != end && it->real == real ? it->entry : nullptr;
}

// The entry cuGetProcAddress means by `symbol` at `version` with `flags`: the newest ABI variant
// introduced at or before `version`, the per-thread one when asked for and there is one.
const Entry* entry_for_name(const char* symbol, int version, uint64_t flags) {
  const bool want_per_thread = (flags & cu::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  const Entry* best = nullptr;
  for (const Entry& e : kEntries) {
    if (!e.cuda || e.version > version || std::strcmp(e.base, symbol) != 0) continue;
    bool better = !best || (e.per_thread == want_per_thread && best->per_thread != want_per_thread) ||
                  (e.per_thread == best->per_thread && e.version > best->version);
    if (better) best = &e;
  }
  return best;
}

const Entry* entry_for_abi_name(const char* name) {
  for (const Entry& e : kEntries) {
    if (std::strcmp(e.abi, name) == 0) return &e;
  }
  return nullptr;
}

void resolve_real_dlsym() {
  if (cnlab_vgpu_real_dlsym) return;
  // The versioned lookup names libc's (or libdl's) own definition, never ours.
  for (const char* version : {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"}) {
    if (void* p = ::dlvsym(RTLD_NEXT, "dlsym", version)) {
      cnlab_vgpu_real_dlsym = reinterpret_cast<DlsymFn*>(p);
      return;
    }
  }
  static const char message[] = "cnlab-vgpu: the C library's dlsym was not found; cannot run\n";
  (void)!::write(2, message, sizeof message - 1);
  std::abort();
}

}  // namespace

void* real_dlsym(void* handle, const char* name) {
  resolve_real_dlsym();
  return cnlab_vgpu_real_dlsym(handle, name);
}

bool is_own_function(const void* address) {
  if (!address) return false;
  static Dl_info self = [] {
    Dl_info info{};
    ::dladdr(reinterpret_cast<const void*>(&is_own_function), &info);
    return info;
  }();
  Dl_info info{};
  return ::dladdr(address, &info) != 0 && info.dli_fbase == self.dli_fbase;
}

void build_proc_address_index() {
  int build = g_builds.fetch_add(1);
  Index& index = g_indexes[build % 2];
  index.count = 0;
  for (const Entry& e : kEntries) {
    void* real = real_slot(e);
    if (real) index.pairs[index.count++] = {real, &e};
  }
  std::sort(index.pairs, index.pairs + index.count, [](const Index::Pair& a, const Index::Pair& b) { return a.real < b.real; });
  g_index.store(&index, std::memory_order_release);
}

void* hook_for(const char* symbol, void* real, int version, uint64_t flags) {
  if (!real || is_own_function(real)) return real;
  if (const Entry* e = entry_for_address(real)) return e->hook;
  // An address the driver does not export under the name we resolved: decide by name and version,
  // and let the hook call what the driver handed out when we had nothing for that variant.
  if (const Entry* e = entry_for_name(symbol, version, flags)) {
    void*& slot = real_slot(*e);
    if (!slot) slot = real;
    return e->hook;
  }
  return real;
}

}  // namespace cnlab::vgpu

// ---- dlsym ----------------------------------------------------------------------------------------

// Decides lookups of the names we hook; everything else (result 0) goes to the C library's dlsym.
int cnlab_vgpu_dlsym_filter(void* handle, const char* name, void** result) {
  resolve_real_dlsym();
  if (!name || !((name[0] == 'c' && name[1] == 'u') || std::strncmp(name, "nvml", 4) == 0)) return 0;
  const Entry* named = entry_for_abi_name(name);
  if (!named) return 0;
  void* found = cnlab_vgpu_real_dlsym(handle, name);
  if (!found || is_own_function(found)) {
    *result = found;  // absent, or already ours (looked up in the global scope)
    return 1;
  }
  // A real driver function: make sure the library knows the driver, then answer the hook.
  bool loaded = named->cuda ? load_real_cuda() : load_real_nvml();
  if (!loaded) {
    *result = found;
    return 1;
  }
  void*& slot = real_slot(*named);
  if (!slot) slot = found;
  *result = named->hook;
  return 1;
}

#if defined(CNLAB_VGPU_NO_DLSYM_HOOK)
// Built into a test program under ThreadSanitizer, whose runtime resolves its own interceptors with
// dlsym before any of our code may run: no dlsym of ours there (that test reaches the hooks by link).
#elif defined(__x86_64__)
// dlsym itself, as a trampoline: names we hook are decided by the filter; every other lookup
// *jumps* to the C library's dlsym with the caller's arguments and return address untouched, so
// that RTLD_NEXT still means "after the caller's object", not "after this library".
asm(R"(
  .text
  .globl dlsym
  .type dlsym, @function
  .p2align 4
dlsym:
  .cfi_startproc
  pushq %rdi
  .cfi_adjust_cfa_offset 8
  pushq %rsi
  .cfi_adjust_cfa_offset 8
  subq $24, %rsp
  .cfi_adjust_cfa_offset 24
  leaq 8(%rsp), %rdx
  call cnlab_vgpu_dlsym_filter
  movq 8(%rsp), %rcx
  addq $24, %rsp
  .cfi_adjust_cfa_offset -24
  popq %rsi
  .cfi_adjust_cfa_offset -8
  popq %rdi
  .cfi_adjust_cfa_offset -8
  testl %eax, %eax
  jz 1f
  movq %rcx, %rax
  ret
1:
  jmp *cnlab_vgpu_real_dlsym(%rip)
  .cfi_endproc
  .size dlsym, .-dlsym
)");
#else
// Elsewhere a plain function: RTLD_NEXT lookups of names we do not hook are then resolved after
// this library rather than after their caller (documented in docs/vgpu.md).
extern "C" CNLAB_VGPU_EXPORT void* dlsym(void* handle, const char* name) {
  void* result = nullptr;
  if (cnlab_vgpu_dlsym_filter(handle, name, &result)) return result;
  return cnlab_vgpu_real_dlsym(handle, name);
}
#endif

// ---- cuGetProcAddress -----------------------------------------------------------------------------

extern "C" cu::CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cu::cuuint64_t flags,
                                            cu::CUdriverProcAddressQueryResult* status) {
  if (!load_real_cuda()) return cu::CUDA_ERROR_NOT_INITIALIZED;
  Library& l = lib();
  cu::CUresult r;
  if (l.cuda.cuGetProcAddress_v2) {
    r = l.cuda.cuGetProcAddress_v2(symbol, pfn, version, flags, status);
  } else if (l.cuda.cuGetProcAddress) {  // a driver older than CUDA 12
    r = l.cuda.cuGetProcAddress(symbol, pfn, version, flags);
    if (status) *status = r == cu::CUDA_SUCCESS ? cu::CU_GET_PROC_ADDRESS_SUCCESS : cu::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  } else {
    return cu::CUDA_ERROR_NOT_SUPPORTED;
  }
  if (r == cu::CUDA_SUCCESS && pfn && symbol) *pfn = hook_for(symbol, *pfn, version, flags);
  return r;
}

extern "C" cu::CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cu::cuuint64_t flags) {
  if (!load_real_cuda()) return cu::CUDA_ERROR_NOT_INITIALIZED;
  Library& l = lib();
  cu::CUresult r;
  if (l.cuda.cuGetProcAddress) {
    r = l.cuda.cuGetProcAddress(symbol, pfn, version, flags);
  } else if (l.cuda.cuGetProcAddress_v2) {
    r = l.cuda.cuGetProcAddress_v2(symbol, pfn, version, flags, nullptr);
  } else {
    return cu::CUDA_ERROR_NOT_SUPPORTED;
  }
  if (r == cu::CUDA_SUCCESS && pfn && symbol) *pfn = hook_for(symbol, *pfn, version, flags);
  return r;
}

extern "C" cu::CUresult cuInit(unsigned int flags) {
  CNLAB_VGPU_ENTER();
  return lib().cuda.cuInit(flags);
}
