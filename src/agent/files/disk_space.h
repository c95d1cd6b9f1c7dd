// How much a directory's filesystem can still take: the bound on what a node unpacks there (a dump
// or a checkpoint as big as a job's memory), where a fixed limit would be either too small for
// large jobs or larger than the disk.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <system_error>

namespace cnlab::agent {

// Bytes an unprivileged writer may still use on the filesystem holding `dir`; 0 when it cannot be
// asked (a missing directory), so that nothing is taken.
inline int64_t free_disk_bytes(const std::filesystem::path& dir) {
  std::error_code ec;
  auto space = std::filesystem::space(dir, ec);
  if (ec) return 0;
  return static_cast<int64_t>(std::min<std::uintmax_t>(space.available, std::numeric_limits<int64_t>::max()));
}

}  // namespace cnlab::agent
