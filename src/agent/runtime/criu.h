// CRIU, the checkpoint/restore engine: how the runtime calls it and what it keeps beside its
// images. Private to src/agent/runtime (the public face is JobHandle::checkpoint and
// ProcessSpec::restore_from in runtime.h).
//
// Every run gets CRIU_FAULT=130: CRIU's path that does not stop a task with a hardware breakpoint
// after its parasite code. Virtual machines whose debug registers never fire (this build machine's)
// hang in `criu dump` without it; elsewhere it only costs a few system calls per task. A run never
// waits for CRIU without a deadline: one that hangs is killed and the call fails.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "common/strings.h"

namespace cnlab::agent::criu {

// Written beside the images by JobHandle::checkpoint: the inodes of the job's pipes to its shim
// when it was dumped, which a restore replaces with the new shim's (`--inherit-fd`).
inline constexpr std::string_view kPipesFile = "cnlab-pipes.json";
struct Pipes {
  uint64_t stdout_pipe = 0, stderr_pipe = 0, status_pipe = 0;
};
std::string encode(const Pipes& pipes);
Result<Pipes> decode_pipes(std::string_view text);

// Mounts of the job's mount namespace whose filesystem CRIU cannot dump (it knows the virtual and
// memory filesystems, not every disk one: the NVIDIA driver of a GPU machine seen here is mounted
// from a squashfs at /usr/local/nvidia, and a dump of any job there failed on it). They are dumped
// as external mounts, and a restore bind-mounts the same path of its own machine in their place,
// which is what a job sees of such a mount anyway (its mount namespace is a copy of the node's).
// Written beside the images: the paths, in order; a restore names them by their index.
inline constexpr std::string_view kExternalMountsFile = "cnlab-external-mounts.json";
// The mount points in /proc/PID/mountinfo text (`mountinfo`) that are external in that sense:
// every mount but the root whose filesystem type is not one CRIU dumps itself.
std::vector<std::string> external_mounts(std::string_view mountinfo);
std::string encode_mounts(const std::vector<std::string>& mounts);
Result<std::vector<std::string>> decode_mounts(std::string_view text);

// CRIU_FAULT=130 and a PATH for the helpers CRIU runs.
std::vector<std::string> environment();

// `criu dump` of the tree whose root (the job's init) is `pid`, into `images`. Afterwards CRIU
// kills the tree, or leaves it running, or leaves it stopped. With `lazy` (post-copy), the memory
// is not written: once everything else is, CRIU writes a byte to descriptor 3 (`--status-fd`) and
// serves the pages from its page server (plain TCP) at `lazy` until a `criu lazy-pages` has pulled
// them all. `external`: the job's external mounts (external_mounts).
enum class Leave { kNothing, kRunning, kStopped };
std::vector<std::string> dump_args(const std::string& criu, pid_t pid, const std::filesystem::path& images,
                                   const std::filesystem::path& log, Leave leave,
                                   const std::vector<std::string>& external, const HostPort* lazy = nullptr);
// `criu lazy-pages` beside a `restore --lazy-pages` of `images`: pulls the pages, on demand and in
// the background, from the dump's page server at `from`; exits once it has them all.
std::vector<std::string> lazy_pages_args(const std::string& criu, const std::filesystem::path& images,
                                         const std::filesystem::path& log, const HostPort& from);
// `criu restore --restore-detached` of `images`, the new pipes' write ends at the given
// descriptors of the CRIU process, the restored root's pid written to `pid_file`, the dump's
// `external` mounts bound from where this machine has them (external[i] for the dump's i-th external
// mount: the same path, or the node's own directory for a job's view mount).
// With `lazy`, the memory comes from a `criu lazy-pages` started beside it (lazy_pages_args).
std::vector<std::string> restore_args(const std::string& criu, const std::filesystem::path& images,
                                      const std::filesystem::path& log, const std::filesystem::path& pid_file,
                                      const Pipes& pipes, int status_fd, int stdout_fd, int stderr_fd,
                                      const std::vector<std::string>& external, bool lazy = false);

struct RunResult {
  bool timed_out = false;
  int exit_code = -1;  // -1: killed by a signal (or timed out)
  std::chrono::milliseconds took{0};
};
// Runs a CRIU command (stdio to /dev/null, environment() as its environment) and waits for it up
// to `timeout`, after which it is killed with SIGKILL.
Result<RunResult> run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout);
// The same in two steps: start it (with `status_fd`, when not -1, as its descriptor 3), and wait
// for it up to `timeout` from `started` (then SIGKILL), or until `give_up` says so (asked every few
// milliseconds; then SIGKILL too).
Result<pid_t> spawn(const std::vector<std::string>& argv, int status_fd = -1);
RunResult wait(pid_t pid, std::chrono::steady_clock::time_point started, std::chrono::milliseconds timeout,
               const std::function<bool()>& give_up = {});

// `criu check`: ok when CRIU can checkpoint on this machine; otherwise why not.
Status check(const std::string& criu, std::chrono::milliseconds timeout);

// The "Error" lines of a CRIU log (the last few, joined), for a failure's message.
std::string log_errors(const std::filesystem::path& log);

// Rewrites the paths of regular files (opened, mapped, working directories) in the images' file
// table that lie at or below `from` to lie below `to` instead: a job restored on another node
// finds its directory where that node keeps it. Returns how many paths were rewritten.
Result<int> rewrite_paths(const std::filesystem::path& images, std::string_view from, std::string_view to);

}  // namespace cnlab::agent::criu
