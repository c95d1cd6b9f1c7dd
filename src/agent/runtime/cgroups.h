// Job cgroups: finding the hierarchies, creating a job's cgroup with its limits, killing
// everything in it, reading its OOM counter and removing it. Private to src/agent/runtime.
//
// v2 where the unified hierarchy has the controllers (enabled on the way down through
// cgroup.subtree_control); v1 otherwise (one directory per hierarchy: memory, cpu, pids, freezer).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/runtime/runtime.h"
#include "common/json_reader.h"
#include "common/result.h"

namespace cnlab::agent::cgroups {

// The cgroup mounts listed in /proc/self/mountinfo.
struct Mounts {
  std::optional<std::filesystem::path> unified;     // the cgroup2 mount point
  std::map<std::string, std::filesystem::path> v1;  // controller -> its hierarchy's mount point
};
Mounts parse_mountinfo(std::string_view text);

// Where job cgroups go on this machine, and which controllers they get.
struct Layout {
  CgroupVersion version = CgroupVersion::kNone;
  std::filesystem::path v2_parent;                          // <unified>/<parent>
  std::map<std::string, std::filesystem::path> v1_parents;  // controller -> <mount>/<parent>
  bool cpu = false;
  bool memory = false;
  bool pids = false;
  bool freezer = false;  // v1 freezer hierarchy, or v2 cgroup.freeze
  bool swap = false;     // memory.memsw (v1); v2 decides per job (memory.swap.max)
  std::string reason;    // why kNone, or what is missing
};
// Creates <parent> in each usable hierarchy (enabling v2 controllers on the way) and reports what
// job cgroups below it can have. Never fails: what does not work is left out, with the reason.
Layout detect(const Mounts& mounts, std::string_view parent);

struct JobCgroup {
  CgroupVersion version = CgroupVersion::kNone;
  std::vector<std::filesystem::path> dirs;  // every directory the job joins (v2: exactly one)
  std::filesystem::path memory_dir;         // where the OOM counter is; empty without memory
  std::filesystem::path freezer_dir;        // v1 freezer, or the v2 directory; empty without
  bool cpu_limit = false;                   // limits actually written
  bool memory_limit = false;
  bool swap_limit = false;
  bool pids_limit = false;

  bool empty() const { return version == CgroupVersion::kNone || dirs.empty(); }
  // The directory whose cgroup.procs lists every process of the job.
  const std::filesystem::path& procs_dir() const { return dirs.front(); }

  // Moves the calling process into every directory (writes "0" to cgroup.procs: pid numbers
  // would be read in the caller's PID namespace). For a freshly forked child.
  Status join_self() const;
  // The pids in the cgroup, as seen from this process's PID namespace.
  std::vector<pid_t> procs() const;
  // SIGKILLs every process (cgroup.kill; else freeze, kill, thaw; else kill until empty) and
  // waits up to `timeout` for the cgroup to empty. With timeout 0, kills without waiting.
  Status kill_all(std::chrono::milliseconds timeout) const;
  // OOM kills counted in the cgroup (memory.events on v2, memory.oom_control on v1).
  int64_t oom_kills() const;
  // Removes the directories (and any the job made below them), retrying while the kernel still
  // counts exiting processes, up to `timeout`. Missing directories are fine.
  Status remove(std::chrono::milliseconds timeout) const;
};

// Creates the job's cgroup `name` below the layout's parent with `limits` (pids_extra added to
// the pids limit for the runtime's own init). Every limit is written, "no limit" included, so a
// leftover empty cgroup of that name is reused as if new; one that still holds processes is an
// error (kAlreadyExists).
Result<JobCgroup> create(const Layout& layout, std::string_view name, const ResourceLimits& limits, int64_t pids_extra);

Json to_json(const JobCgroup& cgroup);
Result<JobCgroup> from_json(const Json& json, std::string path);

// Small file helpers shared with the runtime.
Status write_file(const std::filesystem::path& path, std::string_view content);
Result<std::string> read_file(const std::filesystem::path& path);

}  // namespace cnlab::agent::cgroups
