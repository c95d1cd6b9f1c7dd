// The interception library's configuration, read once from the environment when the library loads.
//
// With an agent (the agent sets these for every job it starts):
//   CNLAB_VGPU_REGION   the tenant's limits region (read-only to jobs)
//   CNLAB_VGPU_DIR      the directory of tenant regions (DIR/tenants/<tenant>)
//   CNLAB_VGPU_TENANT   the tenant (the job's id)
// Standalone (no CNLAB_VGPU_REGION; for sites that only want quotas, under Slurm say):
//   CNLAB_VGPU_MEMORY_LIMIT    VRAM per GPU: "20Gi", "512Mi", "20G" (powers of 1000), "1073741824"
//   CNLAB_VGPU_COMPUTE_SHARE   percent of each GPU's compute, 1..100 (default 100: no limiting)
//   CNLAB_VGPU_HARD_SHARE      "1": hold the share even when the GPU is otherwise idle
//   CNLAB_VGPU_TENANT          processes naming one tenant share one quota (default: this process)
//   CNLAB_VGPU_DIR             where tenant regions live (default /dev/shm/cnlab-vgpu)
// Both:
//   CNLAB_VGPU_LOG             "error" (default), "info" or "debug"; CNLAB_VGPU_LOG_FILE appends
//                              there instead of stderr
//   CNLAB_VGPU_CUDA_LIBRARY    the real driver to load (default "libcuda.so.1")
//   CNLAB_VGPU_NVML_LIBRARY    the real NVML (default "libnvidia-ml.so.1")
//
// A bad value is an error naming the variable, the value and what is allowed; the library then
// refuses CUDA (cuInit fails) rather than run without the limits it was asked to enforce.
#pragma once

#include <cstdint>

#include "vgpu/region.h"

namespace cnlab::vgpu {

enum class LogLevel { kError = 0, kInfo = 1, kDebug = 2 };

struct Config {
  bool agent = false;                 // CNLAB_VGPU_REGION given
  char region_path[512] = {};
  char dir[512] = {};
  char tenant[kIdSize] = {};
  uint64_t memory_limit = kUnlimited;  // standalone
  uint32_t compute_share = 100;        // standalone
  bool hard_share = false;             // standalone
  LogLevel log_level = LogLevel::kError;
  char log_file[512] = {};
  char cuda_library[512] = {};
  char nvml_library[512] = {};
  char error[512] = {};  // non-empty: the configuration is unusable, and why
};

// Reads the configuration from `getenv`-like `lookup` (the environment in the library; a map in
// tests). Never fails: problems land in `error`.
using EnvLookup = const char* (*)(const char* name, void* context);
Config read_config(EnvLookup lookup, void* context);

// Parses a memory quantity: "20Gi" (binary), "20G" / "20GB" (decimal), "512Mi", "64Ki", or bytes.
// Returns false for anything else (empty, negative, fractional, unknown suffix, overflow).
bool parse_bytes(const char* text, uint64_t* bytes);

}  // namespace cnlab::vgpu
