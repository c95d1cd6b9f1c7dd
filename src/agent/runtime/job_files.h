// The files of a job directory (listed in runtime.h) and what they hold; shared by the runtime
// and the shim. Private to src/agent/runtime.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/runtime/cgroups.h"
#include "agent/runtime/runtime.h"
#include "common/result.h"

namespace cnlab::agent::jobfiles {

inline constexpr std::string_view kSpec = "spec.json";
inline constexpr std::string_view kState = "state.json";
inline constexpr std::string_view kExit = "exit.json";
inline constexpr std::string_view kOutput = "output.log";
inline constexpr std::string_view kShimLog = "shim.log";
inline constexpr std::string_view kControl = "control";

// The shim's arguments after shim_command.
inline constexpr std::string_view kJobDirFlag = "--job-dir";
inline constexpr std::string_view kStatusFdFlag = "--status-fd";

// The job directory may be writable by the job's user (run as someone else, the directory is
// root:<job group> 01770 — sticky, so the job cannot remove or replace the runtime's files). So
// files are created fresh (O_EXCL, no symlink followed) and only trusted when owned by us.

// Writes `dir/name` through a temporary file and rename, with fsync, so readers see the whole
// content or nothing. Mode 0600.
Status write_atomic(const std::filesystem::path& dir, std::string_view name, std::string_view content);
// Reads a regular file owned by this process's effective uid (not a symlink). kNotFound when it
// does not exist.
Result<std::string> read_trusted(const std::filesystem::path& file);

// /proc/<pid>/stat, the fields the runtime needs.
struct ProcStat {
  char state = '?';  // R, S, D, Z, X, ...
  pid_t ppid = 0;
  uint64_t start_time = 0;  // clock ticks after boot: with the pid, names one process for good
};
std::optional<ProcStat> read_proc_stat(pid_t pid);

// What the shim runs: the ProcessSpec as start() resolved it.
struct LaunchSpec {
  std::string job_id;
  std::vector<std::string> argv;
  std::vector<std::string> env;
  std::string working_dir;
  std::string hostname;
  bool namespaces = false;
  std::vector<ViewMount> view_mounts;  // bound by the init in the job's mount namespace
  bool switch_user = false;
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;
  cgroups::JobCgroup cgroup;
  RuntimeCapabilities isolation;  // what was applied
  // How the init re-executes itself inside the namespaces (the runtime's shim_command): an init
  // that is a fresh image there maps nothing through the host's mounts, which CRIU requires.
  std::vector<std::string> shim_command;
  // Restore instead of exec: CRIU's images of the job (JobHandle::checkpoint) and the CRIU binary.
  std::string restore_from;
  std::string criu;
  int64_t restore_timeout_ms = 120000;
  bool restore_lazy = false;  // post-copy: the memory comes from a `criu lazy-pages` beside it
};
std::string encode(const LaunchSpec& spec);
Result<LaunchSpec> decode_spec(std::string_view text);

// Written by the shim once the job runs.
struct ShimState {
  pid_t shim_pid = 0;
  uint64_t shim_start_time = 0;
  pid_t job_pid = 0;  // the namespace's init, or the command itself (in this PID ns)
  uint64_t job_start_time = 0;
  bool pid_namespace = false;
  // The inodes of the pipes between the job and the shim (its stdout and stderr, the init's
  // status pipe): the ends CRIU finds outside the dumped tree and that a restore re-attaches.
  uint64_t stdout_pipe = 0, stderr_pipe = 0, status_pipe = 0;
};
std::string encode(const ShimState& state);
Result<ShimState> decode_state(std::string_view text);

// Written by the shim when the job has ended (or could not start).
struct ExitRecord {
  std::optional<int> exit_code;
  std::optional<int> signal;
  bool oom_killed = false;
  int64_t oom_kills = 0;
  bool stopped = false;
  std::string error;
  std::string finished_at;  // output::format_time
};
std::string encode(const ExitRecord& record);
Result<ExitRecord> decode_exit(std::string_view text);
JobStatus to_status(const ExitRecord& record);

}  // namespace cnlab::agent::jobfiles
