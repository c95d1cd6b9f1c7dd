#include "vgpu/config.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace cnlab::vgpu {
namespace {

bool copy_checked(char* to, size_t size, const char* from) {
  size_t n = std::strlen(from);
  if (n >= size) return false;
  std::memcpy(to, from, n + 1);
  return true;
}

bool valid_tenant(const char* id) {
  if (!*id || std::strlen(id) >= static_cast<size_t>(kIdSize)) return false;
  if (std::strcmp(id, ".") == 0 || std::strcmp(id, "..") == 0) return false;
  for (const char* p = id; *p; ++p) {
    char c = *p;
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

bool parse_bytes(const char* text, uint64_t* bytes) {
  if (!text || !*text) return false;
  uint64_t value = 0;
  const char* p = text;
  if (*p < '0' || *p > '9') return false;
  for (; *p >= '0' && *p <= '9'; ++p) {
    uint64_t digit = static_cast<uint64_t>(*p - '0');
    if (value > (~uint64_t{0} - digit) / 10) return false;
    value = value * 10 + digit;
  }
  struct Unit {
    const char* suffix;
    uint64_t factor;
  };
  static const Unit kUnits[] = {
      {"", 1},
      {"Ki", uint64_t{1} << 10}, {"Mi", uint64_t{1} << 20}, {"Gi", uint64_t{1} << 30}, {"Ti", uint64_t{1} << 40},
      {"K", 1000}, {"M", 1000'000}, {"G", 1000'000'000}, {"T", 1000'000'000'000},
      {"KB", 1000}, {"MB", 1000'000}, {"GB", 1000'000'000}, {"TB", 1000'000'000'000},
  };
  for (const Unit& u : kUnits) {
    if (std::strcmp(p, u.suffix) != 0) continue;
    if (value > ~uint64_t{0} / u.factor) return false;
    *bytes = value * u.factor;
    return true;
  }
  return false;
}

Config read_config(EnvLookup lookup, void* context) {
  Config c;
  auto get = [&](const char* name) -> const char* {
    const char* v = lookup(name, context);
    return v && *v ? v : nullptr;
  };
  auto fail = [&](const char* name, const char* value, const char* allowed) {
    if (c.error[0]) return;  // the first problem is the one reported
    std::snprintf(c.error, sizeof c.error, "%s=\"%s\": %s", name, value, allowed);
  };

  if (const char* level = get("CNLAB_VGPU_LOG")) {
    if (std::strcmp(level, "error") == 0) c.log_level = LogLevel::kError;
    else if (std::strcmp(level, "info") == 0) c.log_level = LogLevel::kInfo;
    else if (std::strcmp(level, "debug") == 0) c.log_level = LogLevel::kDebug;
    else fail("CNLAB_VGPU_LOG", level, "expected error, info or debug");
  }
  if (const char* file = get("CNLAB_VGPU_LOG_FILE")) {
    if (!copy_checked(c.log_file, sizeof c.log_file, file)) fail("CNLAB_VGPU_LOG_FILE", file, "path too long");
  }
  const char* cuda = get("CNLAB_VGPU_CUDA_LIBRARY");
  if (!copy_checked(c.cuda_library, sizeof c.cuda_library, cuda ? cuda : "libcuda.so.1")) {
    fail("CNLAB_VGPU_CUDA_LIBRARY", cuda, "path too long");
  }
  const char* nvml = get("CNLAB_VGPU_NVML_LIBRARY");
  if (!copy_checked(c.nvml_library, sizeof c.nvml_library, nvml ? nvml : "libnvidia-ml.so.1")) {
    fail("CNLAB_VGPU_NVML_LIBRARY", nvml, "path too long");
  }

  const char* tenant = get("CNLAB_VGPU_TENANT");
  if (tenant) {
    if (!valid_tenant(tenant)) {
      fail("CNLAB_VGPU_TENANT", tenant, "expected 1-63 characters of letters, digits, '-', '_' or '.' (not . or ..)");
    } else {
      copy_checked(c.tenant, sizeof c.tenant, tenant);
    }
  }

  const char* region = get("CNLAB_VGPU_REGION");
  const char* dir = get("CNLAB_VGPU_DIR");
  if (region) {
    c.agent = true;
    if (!copy_checked(c.region_path, sizeof c.region_path, region)) fail("CNLAB_VGPU_REGION", region, "path too long");
    if (!dir) fail("CNLAB_VGPU_DIR", "", "the directory of tenant regions is required with CNLAB_VGPU_REGION");
    if (!tenant) fail("CNLAB_VGPU_TENANT", "", "the tenant is required with CNLAB_VGPU_REGION");
    // The agent owns the limits: the standalone variables would be ignored, so say so by refusing.
    for (const char* name : {"CNLAB_VGPU_MEMORY_LIMIT", "CNLAB_VGPU_COMPUTE_SHARE", "CNLAB_VGPU_HARD_SHARE"}) {
      if (const char* v = get(name)) fail(name, v, "not allowed with CNLAB_VGPU_REGION (the agent sets the limits)");
    }
  } else if (!tenant) {
    // Standalone without a tenant: this process alone.
    std::snprintf(c.tenant, sizeof c.tenant, "pid-%d", static_cast<int>(::getpid()));
  }
  if (dir && !copy_checked(c.dir, sizeof c.dir, dir)) fail("CNLAB_VGPU_DIR", dir, "path too long");
  if (!dir) copy_checked(c.dir, sizeof c.dir, "/dev/shm/cnlab-vgpu");

  if (const char* limit = get("CNLAB_VGPU_MEMORY_LIMIT"); limit && !c.agent) {
    if (!parse_bytes(limit, &c.memory_limit) || c.memory_limit == 0) {
      fail("CNLAB_VGPU_MEMORY_LIMIT", limit, "expected a size above zero such as 20Gi, 512Mi, 20G or a number of bytes");
    }
  }
  if (const char* share = get("CNLAB_VGPU_COMPUTE_SHARE"); share && !c.agent) {
    char* end = nullptr;
    long v = std::strtol(share, &end, 10);
    if (!end || *end || v < 1 || v > 100) fail("CNLAB_VGPU_COMPUTE_SHARE", share, "expected a whole percent from 1 to 100");
    else c.compute_share = static_cast<uint32_t>(v);
  }
  if (const char* hard = get("CNLAB_VGPU_HARD_SHARE"); hard && !c.agent) {
    if (std::strcmp(hard, "1") == 0) c.hard_share = true;
    else if (std::strcmp(hard, "0") != 0) fail("CNLAB_VGPU_HARD_SHARE", hard, "expected 0 or 1");
  }
  return c;
}

}  // namespace cnlab::vgpu
