// The hooks: C-linkage functions under the driver's own ABI names (and NVML's), exported from
// libcnlab-vgpu.so. Declared here from the function types in cuda_api.h / nvml_api.h, so that every
// definition in hooks_*.cpp is checked against the same list the library resolves and hands out.
#pragma once

#include "vgpu/hook_table.h"
#include "vgpu/nvml_api.h"

#define CNLAB_VGPU_EXPORT __attribute__((visibility("default")))

extern "C" {
#define CNLAB_DECLARE_HOOK(abi, base, version, per_thread, type) CNLAB_VGPU_EXPORT cnlab::vgpu::cu::type abi;
CNLAB_VGPU_CUDA_HOOKS(CNLAB_DECLARE_HOOK)
#undef CNLAB_DECLARE_HOOK
#define CNLAB_DECLARE_NVML_HOOK(abi, type) CNLAB_VGPU_EXPORT cnlab::vgpu::nvml::type abi;
CNLAB_VGPU_NVML_HOOKS(CNLAB_DECLARE_NVML_HOOK)
#undef CNLAB_DECLARE_NVML_HOOK
}

// The prologue of every CUDA hook: attach at the first call; refuse CUDA when the library cannot
// enforce what it was asked to (the reason was logged once).
#define CNLAB_VGPU_ENTER()                                                            \
  do {                                                                                \
    if (!::cnlab::vgpu::attached() && !::cnlab::vgpu::attach()) {                     \
      return ::cnlab::vgpu::cu::CUDA_ERROR_NOT_INITIALIZED;                           \
    }                                                                                 \
  } while (0)
