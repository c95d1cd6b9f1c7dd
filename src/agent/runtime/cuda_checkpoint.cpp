#include "agent/runtime/cuda_checkpoint.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "common/strings.h"

namespace cnlab::agent::cuda {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

struct Ran {
  int exit_code = -1;  // -1: killed (it ran past its deadline) or by a signal
  std::string output;  // stdout and stderr together, trimmed
};

// Runs the utility with its output captured, killed at the deadline.
Result<Ran> run(const std::vector<std::string>& args, milliseconds timeout) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return Error::internal(std::string("pipe: ") + std::strerror(errno));
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string path_env = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  char* envp[] = {path_env.data(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDERR_FILENO);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  if (rc != 0) {
    ::close(out[0]);
    return Error::of(ErrorCode::kFailedPrecondition, "cuda-checkpoint", args[0], "cannot run: " + std::string(std::strerror(rc)));
  }
  Ran ran;
  const auto deadline = steady_clock::now() + timeout;
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - steady_clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd readable{out[0], POLLIN, 0};
    if (::poll(&readable, 1, static_cast<int>(left)) < 0 && errno != EINTR) break;
    char buffer[512];
    const ssize_t n = ::read(out[0], buffer, sizeof buffer);
    if (n == 0) break;  // every copy of the write end is closed: it has exited
    if (n > 0 && ran.output.size() < 4096) ran.output.append(buffer, static_cast<size_t>(n));
  }
  ::close(out[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!timed_out && WIFEXITED(status)) ran.exit_code = WEXITSTATUS(status);
  ran.output = std::string(trim(ran.output));
  if (timed_out) {
    return Error::of(ErrorCode::kUnavailable, "cuda-checkpoint", fmt::format("{}", fmt::join(args, " ")),
                     fmt::format("did not finish within {}ms and was killed", timeout.count()));
  }
  return ran;
}

Status act(const std::string& tool, pid_t pid, const char* action, milliseconds timeout,
           const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {tool, "--action", action, "--pid", std::to_string(pid)};
  args.insert(args.end(), extra.begin(), extra.end());
  auto ran = run(args, timeout);
  if (!ran) return ran.error();
  if (ran->exit_code != 0) {
    return Error::of(ErrorCode::kFailedPrecondition, "process", std::to_string(pid),
                     fmt::format("cuda-checkpoint --action {} failed: {}", action,
                                 ran->output.empty() ? fmt::format("exit code {}", ran->exit_code) : ran->output));
  }
  return {};
}

}  // namespace

std::string state_of(const std::string& tool, pid_t pid, milliseconds timeout) {
  auto ran = run({tool, "--get-state", "--pid", std::to_string(pid)}, timeout);
  if (!ran || ran->exit_code != 0) return "";
  return ran->output;
}

Result<int> suspend(const std::string& tool, const std::vector<pid_t>& pids, milliseconds timeout) {
  std::vector<pid_t> suspended;
  for (pid_t pid : pids) {
    const std::string state = state_of(tool, pid, timeout);
    // No CUDA state: CRIU dumps it as it is. Checkpointed already (a tree dumped before and left
    // stopped): its GPU state is in its memory.
    if (state.empty() || state == "checkpointed") continue;
    Status done;
    if (state == "running") {
      // The lock's own wait is half the deadline, so that the utility reports its timeout itself.
      done = act(tool, pid, "lock", timeout, {"--timeout", std::to_string(timeout.count() / 2)});
    } else if (state != "locked") {
      done = Error::of(ErrorCode::kFailedPrecondition, "process", std::to_string(pid), "its CUDA state is " + state);
    }
    if (done) {
      done = act(tool, pid, "checkpoint", timeout);
      if (!done) (void)act(tool, pid, "unlock", timeout);
    }
    if (!done) {
      if (!suspended.empty()) (void)resume(tool, suspended, {}, timeout);
      return done.error();
    }
    suspended.push_back(pid);
  }
  return static_cast<int>(suspended.size());
}

Result<int> resume(const std::string& tool, const std::vector<pid_t>& pids, const DeviceMap& map, milliseconds timeout) {
  int resumed = 0;
  const std::string devices = device_map_argument(map);
  for (pid_t pid : pids) {
    const std::string state = state_of(tool, pid, timeout);
    if (state == "checkpointed") {
      std::vector<std::string> extra;
      if (!devices.empty()) extra = {"--device-map", devices};
      if (auto restored = act(tool, pid, "restore", timeout, extra); !restored) return restored.error();
    } else if (state != "locked") {
      continue;  // running, or no CUDA state
    }
    if (auto unlocked = act(tool, pid, "unlock", timeout); !unlocked) return unlocked.error();
    ++resumed;
  }
  return resumed;
}

Status usable(const std::string& tool, milliseconds timeout) {
  if (std::filesystem::path(tool).filename() != "cnlab-cuda-checkpoint") return {};
  auto ran = run({tool, "--check"}, timeout);
  if (!ran) return ran.error();
  if (ran->exit_code != 0) {
    return Error::of(ErrorCode::kFailedPrecondition, "cuda-checkpoint", tool,
                     ran->output.empty() ? fmt::format("--check failed with exit code {}", ran->exit_code) : ran->output);
  }
  return {};
}

bool may_hold_context(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/environ", pid), std::ios::binary);
  if (!in) return false;
  for (std::string entry; std::getline(in, entry, '\0');) {
    if (entry == "CUDA_VISIBLE_DEVICES=") return false;
  }
  return true;
}

std::string device_map_argument(const DeviceMap& map) {
  bool moved = false;
  std::string out;
  for (const auto& [from, to] : map) {
    moved = moved || from != to;
    out += (out.empty() ? "" : ",") + from + "=" + to;
  }
  return moved ? out : "";
}

std::string find_tool() {
  for (const char* dir : {"/usr/local/bin", "/usr/bin", "/usr/local/sbin", "/usr/sbin", "/bin"}) {
    const std::string path = std::string(dir) + "/cuda-checkpoint";
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe);
  if (n <= 0 || static_cast<size_t>(n) >= sizeof exe) return "";
  return tool_beside(std::string(exe, static_cast<size_t>(n)));
}

std::string tool_beside(const std::string& exe) {
  const size_t slash = exe.rfind('/');
  if (slash == std::string::npos) return "";
  const std::string path = exe.substr(0, slash + 1) + "cnlab-cuda-checkpoint";
  struct stat file {};
  if (::stat(path.c_str(), &file) != 0 || !S_ISREG(file.st_mode) || ::access(path.c_str(), X_OK) != 0) return "";
  return path;
}

}  // namespace cnlab::agent::cuda
