// How programs reach the driver, and how the library puts its hooks in their way:
//  - linked against libcuda.so.1: the hooks' exported symbols come first (LD_PRELOAD);
//  - dlopen("libcuda.so.1") + dlsym(handle, name), the CUDA runtime's way: the library's own
//    `dlsym` sees every lookup; when the answer is a real driver function it has a hook for, the
//    hook is answered instead (any other lookup is passed on untouched, RTLD_NEXT included, with the
//    caller's return address intact on x86-64);
//  - cuGetProcAddress / cuGetProcAddress_v2 (by base name, version and stream flavour): the real
//    driver answers, and a function we hook is swapped for its hook, recognised by address (or, if
//    the driver hands out an address it does not export, by the name and version rules of
//    hook_table.h). Everything else, cuGetExportTable first of all, passes through untouched.
#pragma once

#include <cstdint>

namespace cnlab::vgpu {

// The C library's dlsym (the one our `dlsym` stands in front of).
void* real_dlsym(void* handle, const char* name);
// Whether `address` lies in this library (a driver path that leads back to us must not be called).
bool is_own_function(const void* address);
// (Re)builds the address -> hook index after the real driver or NVML was loaded.
void build_proc_address_index();
// The hook for a real function handed out for `symbol` (base name) at `version` with `flags`, or
// `real` itself when we do not hook it.
void* hook_for(const char* symbol, void* real, int version, uint64_t flags);

}  // namespace cnlab::vgpu
