// The shim: the per-job supervisor (see runtime.h).
//
// Why a separately exec'd program rather than a fork of the agent: the agent is multi-threaded, so
// a forked copy may only make async-signal-safe calls until it execs — no malloc, no JSON, no
// formatting — while the shim needs all of those for as long as the job runs. Exec'ing gives it
// a fresh, single-threaded process image. Being single-threaded is what lets the shim, in turn,
// fork the job's init and command and run ordinary code in them before exec.
//
// Process tree, with namespaces:        without (the fallback):
//   shim (own session, subreaper)         shim (own session, subreaper)
//    └ init: PID 1 of the job's PID,        └ command (own session and process group)
//      mount, IPC and UTS namespaces
//       └ command (PID 2)
// The init comes from a short-lived middle process that unshares the namespaces and forks it;
// as the shim is a child subreaper, the init is re-parented to the shim when the middle exits.
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "agent/runtime/criu.h"
#include "agent/runtime/job_files.h"
#include "agent/runtime/output_format.h"
#include "agent/runtime/runtime.h"
#include "common/json_reader.h"
#include "common/strings.h"

namespace cnlab::agent {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr milliseconds kStartTimeout{10000};  // for the job's command to be exec'd
constexpr milliseconds kFlushDelay{5};        // output reaches the file at most this late
constexpr size_t kFlushBytes = 256 * 1024;    // ... or as soon as this much is waiting
constexpr milliseconds kPartialDelay{1000};   // an unfinished line is written after this
constexpr milliseconds kDrainTimeout{2000};   // after the job ends, for its pipes to close
constexpr milliseconds kCleanupTimeout{2000};
constexpr milliseconds kReapTimeout{1000};
constexpr size_t kReadBytes = 64 * 1024;
constexpr int kPipeBytes = 1024 * 1024;
constexpr const char* kDefaultPath = "/usr/local/bin:/usr/bin:/bin";
constexpr std::string_view kInitFlag = "--init";

// Where the job's processes find their descriptors between fork and exec.
constexpr int kExecErrFd = 3;     // a failure record for the shim (close-on-exec: EOF = exec'd)
constexpr int kInitStatusFd = 4;  // the init writes the command's wait status here
constexpr int kStdoutFd = 5;
constexpr int kStderrFd = 6;
constexpr int kPidFd = 7;  // the middle process writes the init's pid here
constexpr int kFirstFreeFd = 8;

enum class Stage : int32_t {
  kFds = 1,
  kUnshare,
  kForkInit,
  kJoinCgroup,
  kMountPrivate,
  kMountProc,
  kMountView,
  kHostname,
  kSetsid,
  kForkCommand,
  kSetgroups,
  kSetgid,
  kSetuid,
  kChdir,
  kExec,
  kExecInit,
  kRestore,
};

const char* stage_name(Stage stage) {
  switch (stage) {
    case Stage::kFds: return "fds";
    case Stage::kUnshare: return "unshare";
    case Stage::kForkInit: return "fork_init";
    case Stage::kJoinCgroup: return "join_cgroup";
    case Stage::kMountPrivate: return "mount_private";
    case Stage::kMountProc: return "mount_proc";
    case Stage::kMountView: return "mount_view";
    case Stage::kHostname: return "hostname";
    case Stage::kSetsid: return "setsid";
    case Stage::kForkCommand: return "fork_command";
    case Stage::kSetgroups: return "setgroups";
    case Stage::kSetgid: return "setgid";
    case Stage::kSetuid: return "setuid";
    case Stage::kChdir: return "chdir";
    case Stage::kExec: return "exec";
    case Stage::kExecInit: return "exec_init";
    case Stage::kRestore: return "restore";
  }
  return "unknown";
}

struct ChildFailure {
  int32_t stage = 0;
  int32_t err = 0;
};

[[noreturn]] void child_fail(Stage stage, int err) {
  const ChildFailure failure{static_cast<int32_t>(stage), err};
  (void)!::write(kExecErrFd, &failure, sizeof failure);
  ::_exit(127);
}

std::string errno_text(int err) { return std::strerror(err); }

// Moves `sources[i]` to descriptor 3 + i in a freshly forked child and closes everything else
// from kFirstFreeFd up. Two steps, so that a source already sitting on a target is not clobbered.
void layout_child_fds(const std::array<int, 5>& sources) {
  std::array<int, 5> high{};
  for (size_t i = 0; i < sources.size(); ++i) {
    high[i] = sources[i] < 0 ? -1 : ::fcntl(sources[i], F_DUPFD, 64);
    if (sources[i] >= 0 && high[i] < 0) ::_exit(127);  // cannot even report it: kExecErrFd isn't set up
  }
  for (size_t i = 0; i < high.size(); ++i) {
    const int target = kExecErrFd + static_cast<int>(i);
    if (high[i] < 0) {
      ::close(target);
      continue;
    }
    if (::dup2(high[i], target) < 0) ::_exit(127);
  }
  ::close_range(kFirstFreeFd, ~0U, 0);
  // dup2 cleared close-on-exec; the command must not inherit these.
  for (int fd : {kExecErrFd, kInitStatusFd, kPidFd}) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
}

// What the command's process needs, prepared before fork.
struct ExecPlan {
  std::vector<std::string> candidates;  // argv[0] through PATH
  std::vector<char*> argv;
  std::vector<char*> envp;
  std::vector<gid_t> groups;
  std::vector<std::string> init_args;  // the init's re-exec (empty: it runs forked)
  std::vector<char*> init_argv;
};

// Everything the command's process (and the init's re-exec) needs, built while allocation is
// harmless: before any fork.
void build_plan(jobfiles::LaunchSpec& spec, const fs::path& job_dir, ExecPlan& plan) {
  const std::string& name = spec.argv[0];
  if (name.find('/') != std::string::npos) {
    plan.candidates.push_back(name);
  } else {
    std::string path = kDefaultPath;
    for (const auto& entry : spec.env) {
      if (entry.rfind("PATH=", 0) == 0) path = entry.substr(5);
    }
    for (auto dir : split(path, ':')) {
      plan.candidates.push_back(fmt::format("{}/{}", dir.empty() ? "." : dir, name));
    }
  }
  for (auto& arg : spec.argv) plan.argv.push_back(arg.data());
  plan.argv.push_back(nullptr);
  for (auto& entry : spec.env) plan.envp.push_back(entry.data());
  plan.envp.push_back(nullptr);
  plan.groups.assign(spec.groups.begin(), spec.groups.end());
  if (plan.groups.empty()) plan.groups.push_back(spec.gid);
  if (!spec.shim_command.empty()) {
    plan.init_args = spec.shim_command;
    plan.init_args.insert(plan.init_args.end(), {std::string(kInitFlag), std::string(jobfiles::kJobDirFlag), job_dir.string()});
    for (auto& arg : plan.init_args) plan.init_argv.push_back(arg.data());
    plan.init_argv.push_back(nullptr);
  }
}

// In the command's process: from a copy of the shim (or init) to the job's program.
[[noreturn]] void exec_command(const jobfiles::LaunchSpec& spec, ExecPlan& plan, bool own_session) {
  sigset_t none;
  sigemptyset(&none);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
  }
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (own_session) {
    if (::setsid() < 0) child_fail(Stage::kSetsid, errno);
  } else {
    ::setpgid(0, 0);  // its own group inside the init's session
  }
  if (::dup2(kStdoutFd, STDOUT_FILENO) < 0 || ::dup2(kStderrFd, STDERR_FILENO) < 0) child_fail(Stage::kFds, errno);
  for (int fd : {kInitStatusFd, kStdoutFd, kStderrFd, kPidFd}) ::close(fd);
  ::umask(022);
  if (spec.switch_user) {
    if (::setgroups(plan.groups.size(), plan.groups.data()) != 0) child_fail(Stage::kSetgroups, errno);
    if (::setgid(spec.gid) != 0) child_fail(Stage::kSetgid, errno);
    if (::setuid(spec.uid) != 0) child_fail(Stage::kSetuid, errno);
  }
  if (::chdir(spec.working_dir.c_str()) != 0) child_fail(Stage::kChdir, errno);
  // As execvpe does, but through the PATH of the job's own environment.
  int failure = ENOENT;
  bool denied = false;
  for (const auto& candidate : plan.candidates) {
    ::execve(candidate.c_str(), plan.argv.data(), plan.envp.data());
    const int err = errno;
    if (err == EACCES) {
      denied = true;
    } else if (err != ENOENT && err != ENOTDIR && err != ELOOP && err != ENAMETOOLONG) {
      failure = err;
      break;
    }
  }
  child_fail(Stage::kExec, denied && failure == ENOENT ? EACCES : failure);
}

bool forwarded(int sig) {
  switch (sig) {
    // Faults are the init's own; job control signals make no sense for it.
    case SIGCHLD:
    case SIGFPE:
    case SIGILL:
    case SIGSEGV:
    case SIGBUS:
    case SIGABRT:
    case SIGTRAP:
    case SIGSYS:
    case SIGTTIN:
    case SIGTTOU:
    case SIGKILL:
    case SIGSTOP: return false;
    default: return true;
  }
}

// PID 1 of the job's namespaces. The kernel gives PID 1 no default signal actions, so the
// command could not be stopped with SIGTERM if it were PID 1 itself and did not handle it; the
// init forwards signals to it and reaps orphans. When the command exits, the init hands its
// wait status to the shim and exits, and the kernel kills whatever is left in the namespace.
[[noreturn]] void run_init(const jobfiles::LaunchSpec& spec, ExecPlan& plan) {
  sigset_t all;
  sigfillset(&all);
  ::sigprocmask(SIG_SETMASK, &all, nullptr);
  // The shim's stdin, stdout and stderr are files reached through the host's mounts; opened
  // afresh in the job's mount namespace, nothing of the tree refers outside it but the pipes to
  // the shim, which is what lets CRIU dump it.
  const int null_fd = ::open("/dev/null", O_RDWR);
  if (null_fd < 0) child_fail(Stage::kFds, errno);
  for (int fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO}) {
    if (::dup2(null_fd, fd) < 0) child_fail(Stage::kFds, errno);
  }
  if (null_fd > STDERR_FILENO) ::close(null_fd);
  if (auto s = spec.cgroup.join_self(); !s) child_fail(Stage::kJoinCgroup, EIO);
  // Private propagation first, so the fresh /proc does not leak into the host's namespace.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) child_fail(Stage::kMountPrivate, errno);
  if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
    child_fail(Stage::kMountProc, errno);
  }
  // The job's directories at the paths it is given, the same on every node (kJobViewRoot).
  for (const ViewMount& mount : spec.view_mounts) {
    if (::mount(mount.source.c_str(), mount.view.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      child_fail(Stage::kMountView, errno);
    }
  }
  if (!spec.hostname.empty() && ::sethostname(spec.hostname.data(), spec.hostname.size()) != 0) {
    child_fail(Stage::kHostname, errno);
  }
  // The job's session starts inside its namespace (CRIU dumps a tree only with its session).
  if (::setsid() < 0) child_fail(Stage::kSetsid, errno);
  const pid_t command = ::fork();
  if (command < 0) child_fail(Stage::kForkCommand, errno);
  if (command == 0) exec_command(spec, plan, /*own_session=*/false);
  for (int fd : {kExecErrFd, kStdoutFd, kStderrFd, kPidFd}) ::close(fd);
  while (true) {
    siginfo_t info{};
    const int sig = ::sigwaitinfo(&all, &info);
    if (sig < 0) continue;
    if (sig == SIGCHLD) {
      int status = 0;
      pid_t pid;
      while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
        if (pid == command) {
          (void)!::write(kInitStatusFd, &status, sizeof status);
          ::_exit(0);
        }
      }
    } else if (forwarded(sig)) {
      ::kill(command, sig);
    }
  }
}

// The init as a fresh image inside the namespaces: `<shim_command> --init --job-dir DIR`. A forked
// copy of the shim would keep the shim's binary and libraries mapped through the host's mounts,
// which CRIU cannot name from the job's mount namespace. Keeps the descriptors the init needs.
[[noreturn]] void exec_init(const std::vector<char*>& init_argv) {
  for (int fd : {kExecErrFd, kInitStatusFd}) ::fcntl(fd, F_SETFD, 0);
  ::execv(init_argv[0], init_argv.data());
  child_fail(Stage::kExecInit, errno);
}

// Between the shim and the init: unshares the namespaces (the next child becomes PID 1), forks
// the init, tells the shim its pid and exits.
[[noreturn]] void run_middle(const jobfiles::LaunchSpec& spec, ExecPlan& plan) {
  if (::unshare(CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS) != 0) child_fail(Stage::kUnshare, errno);
  const pid_t init = ::fork();
  if (init < 0) child_fail(Stage::kForkInit, errno);
  if (init == 0) {
    if (!plan.init_argv.empty()) exec_init(plan.init_argv);
    run_init(spec, plan);  // a spec from before the init re-executed itself
  }
  (void)!::write(kPidFd, &init, sizeof init);
  ::_exit(0);
}

// `--init`: the init re-executed inside the job's namespaces by exec_init, with the descriptors
// laid out as before. Failures go to the shim through kExecErrFd, as from the forked init.
[[noreturn]] void init_main(const fs::path& job_dir) {
  // Close-on-exec again: the command's exec closing kExecErrFd is how the shim learns it ran.
  for (int fd : {kExecErrFd, kInitStatusFd}) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  auto text = jobfiles::read_trusted(job_dir / jobfiles::kSpec);
  if (!text) child_fail(Stage::kExecInit, EIO);
  auto spec = jobfiles::decode_spec(*text);
  if (!spec) child_fail(Stage::kExecInit, EINVAL);
  spec->shim_command.clear();  // this is the init: no further re-exec
  ExecPlan plan;
  build_plan(*spec, job_dir, plan);
  run_init(*spec, plan);
}

uint64_t pipe_inode(int fd) {
  struct stat st {};
  return fd >= 0 && ::fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

// Reads exactly `size` bytes unless EOF or the deadline comes first; returns the bytes read.
size_t read_until(int fd, void* buffer, size_t size, steady_clock::time_point deadline) {
  size_t got = 0;
  while (got < size) {
    const auto left = std::chrono::ceil<milliseconds>(deadline - steady_clock::now()).count();
    if (left <= 0) break;
    pollfd pfd{fd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    const ssize_t n = ::read(fd, static_cast<char*>(buffer) + got, size - got);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  return got;
}

struct Pump {
  int fd = -1;
  output::LineSplitter splitter;
  std::optional<steady_clock::time_point> pending_since;
  explicit Pump(OutputStream stream) : splitter(stream) {}
};

class Shim {
 public:
  Shim(fs::path dir, int status_fd) : dir_(std::move(dir)), status_fd_(status_fd) {}
  int run();

 private:
  Status prepare();
  Status launch();
  Status launch_restore();
  void fail_start(const Error& error, const std::string& stage, int err);
  void report(const Json& message);
  void loop();
  void finish();

  void read_pump(Pump& pump, const char* timestamp);
  void handle_signals();
  void handle_control();
  void reap();
  void deliver(int sig);
  void kill_tree();
  void write_out();
  const char* now_stamp();

  fs::path dir_;
  int status_fd_;
  jobfiles::LaunchSpec spec_;
  ExecPlan plan_;
  int output_fd_ = -1;
  int control_fd_ = -1;
  int signal_fd_ = -1;
  std::array<int, 2> out_{-1, -1};
  std::array<int, 2> err_{-1, -1};
  std::array<int, 2> exec_err_{-1, -1};
  std::array<int, 2> init_status_{-1, -1};
  std::array<int, 2> pid_pipe_{-1, -1};
  Pump stdout_{OutputStream::kStdout};
  Pump stderr_{OutputStream::kStderr};
  std::string control_buffer_;
  std::string out_buffer_;
  steady_clock::time_point out_since_;
  output::TimestampFormatter stamps_;
  pid_t job_pid_ = 0;
  milliseconds restore_took_{0};
  bool job_done_ = false;
  int job_status_ = 0;
  bool stopped_ = false;
  steady_clock::time_point drain_deadline_;
  uint64_t dropped_bytes_ = 0;
};

const char* Shim::now_stamp() {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return stamps_.format(now);
}

void Shim::report(const Json& message) {
  if (status_fd_ < 0) return;
  const std::string line = message.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
  // The agent may have died since it started us: EPIPE (SIGPIPE is ignored) is fine.
  (void)!::write(status_fd_, line.data(), line.size());
  ::close(status_fd_);
  status_fd_ = -1;
}

Status Shim::prepare() {
  auto text = jobfiles::read_trusted(dir_ / jobfiles::kSpec);
  if (!text) return text.error();
  auto spec = jobfiles::decode_spec(*text);
  if (!spec) return spec.error();
  spec_ = std::move(*spec);

  build_plan(spec_, dir_, plan_);

  const fs::path control = dir_ / jobfiles::kControl;
  if (::mkfifo(control.c_str(), 0600) != 0) {
    return Error::of(ErrorCode::kUnavailable, "file", control.string(), "mkfifo: " + errno_text(errno));
  }
  // Read-write, so that the FIFO always has a writer and poll never reports a hang-up.
  control_fd_ = ::open(control.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  const fs::path output = dir_ / jobfiles::kOutput;
  output_fd_ = ::open(output.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (control_fd_ < 0 || output_fd_ < 0) {
    return Error::of(ErrorCode::kUnavailable, "job_dir", dir_.string(), "open: " + errno_text(errno));
  }
  for (auto* pipe : {&out_, &err_, &exec_err_, &init_status_, &pid_pipe_}) {
    if (::pipe2(pipe->data(), O_CLOEXEC) != 0) return Error::internal("pipe: " + errno_text(errno));
  }
  for (int fd : {out_[0], err_[0]}) {
    // A bigger pipe lets a burst of output wait there instead of blocking the job.
    (void)::fcntl(fd, F_SETPIPE_SZ, kPipeBytes);
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  stdout_.fd = out_[0];
  stderr_.fd = err_[0];
  return {};
}

Status Shim::launch() {
  if (!spec_.restore_from.empty()) return launch_restore();
  const auto deadline = steady_clock::now() + kStartTimeout;
  const pid_t child = ::fork();
  if (child < 0) {
    const Error error = Error::internal("fork: " + errno_text(errno));
    fail_start(error, "fork", errno);
    return error;
  }
  if (child == 0) {
    layout_child_fds({exec_err_[1], init_status_[1], out_[1], err_[1], pid_pipe_[1]});
    if (spec_.namespaces) run_middle(spec_, plan_);
    if (auto s = spec_.cgroup.join_self(); !s) child_fail(Stage::kJoinCgroup, EIO);
    exec_command(spec_, plan_, /*own_session=*/true);
  }
  for (int* fd : {&exec_err_[1], &init_status_[1], &out_[1], &err_[1], &pid_pipe_[1]}) {
    ::close(*fd);
    *fd = -1;
  }
  job_pid_ = child;
  if (spec_.namespaces) {
    pid_t init = 0;
    const bool got_pid = read_until(pid_pipe_[0], &init, sizeof init, deadline) == sizeof init;
    if (!got_pid) ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);  // the middle exits right after writing
    job_pid_ = got_pid ? init : 0;
  }
  ChildFailure failure;
  const size_t got = read_until(exec_err_[0], &failure, sizeof failure, deadline);
  if (got == sizeof failure) {
    const auto stage = static_cast<Stage>(failure.stage);
    std::string message;
    switch (stage) {
      case Stage::kExec:
        message = fmt::format("cannot execute \"{}\" as uid {}: {}", spec_.argv[0],
                              spec_.switch_user ? spec_.uid : ::geteuid(), errno_text(failure.err));
        break;
      case Stage::kChdir:
        message = fmt::format("cannot enter \"{}\" as uid {}: {}", spec_.working_dir,
                              spec_.switch_user ? spec_.uid : ::geteuid(), errno_text(failure.err));
        break;
      default: message = fmt::format("job setup failed at {}: {}", stage_name(stage), errno_text(failure.err));
    }
    fail_start(Error::failed_precondition(message), stage_name(stage), failure.err);
    return Error::failed_precondition(message);
  }
  const bool timed_out = steady_clock::now() >= deadline;
  if (job_pid_ == 0 || timed_out) {
    const std::string message = timed_out ? fmt::format("the job did not start within {}ms", kStartTimeout.count())
                                          : "the job's namespaces could not be set up (no init pid)";
    fail_start(Error::internal(message), "start", 0);
    return Error::internal(message);
  }
  return {};
}

// A job restored from CRIU's images instead of started: `criu restore --restore-detached` runs in
// the job's cgroup (the restored tree inherits it) with the shim's new pipes handed in for the
// ones the images name outside the tree; the restored init is then re-parented to the shim, the
// subreaper, and carries on as if it had been started here.
// Whether SIGTERM or SIGINT waits for the shim (blocked, for its signalfd). Only looked at, not
// taken: a SIGCHLD of the job waiting beside it is still there for the loop.
bool asked_to_stop() {
  sigset_t pending;
  sigemptyset(&pending);
  return ::sigpending(&pending) == 0 && (sigismember(&pending, SIGTERM) == 1 || sigismember(&pending, SIGINT) == 1);
}

Status Shim::launch_restore() {
  const fs::path images = spec_.restore_from;
  auto meta_text = jobfiles::read_trusted(images / criu::kPipesFile);
  auto pipes = meta_text ? criu::decode_pipes(*meta_text) : Result<criu::Pipes>(meta_text.error());
  if (!pipes) {
    fail_start(pipes.error(), "restore", 0);
    return pipes.error();
  }
  // Absent from images of an agent that predates them: no external mounts.
  std::vector<std::string> external;
  if (fs::exists(images / criu::kExternalMountsFile)) {
    auto mounts_text = jobfiles::read_trusted(images / criu::kExternalMountsFile);
    auto mounts = mounts_text ? criu::decode_mounts(*mounts_text) : Result<std::vector<std::string>>(mounts_text.error());
    if (!mounts) {
      fail_start(mounts.error(), "restore", 0);
      return mounts.error();
    }
    external = std::move(*mounts);
  }
  // Each mount bound from this machine's same path, but the job's own directories from where this
  // node keeps them.
  for (std::string& from : external) {
    for (const ViewMount& mount : spec_.view_mounts) {
      if (from == mount.view) from = mount.source.string();
    }
  }
  const fs::path pid_file = dir_ / "restore.pid";
  std::vector<std::string> args = criu::restore_args(spec_.criu, images, dir_ / "restore.log", pid_file, *pipes,
                                                     kInitStatusFd, kStdoutFd, kStderrFd, external, spec_.restore_lazy);
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = criu::environment();
  std::vector<char*> envp;
  for (auto& entry : env) envp.push_back(entry.data());
  envp.push_back(nullptr);

  const auto started = steady_clock::now();
  const pid_t child = ::fork();
  if (child < 0) {
    const Error error = Error::internal("fork: " + errno_text(errno));
    fail_start(error, "fork", errno);
    return error;
  }
  if (child == 0) {
    layout_child_fds({exec_err_[1], init_status_[1], out_[1], err_[1], -1});
    ::fcntl(kInitStatusFd, F_SETFD, 0);  // handed to the restored init
    const int null_fd = ::open("/dev/null", O_RDWR);
    for (int fd : {STDIN_FILENO, STDOUT_FILENO}) ::dup2(null_fd, fd);
    if (auto s = spec_.cgroup.join_self(); !s) child_fail(Stage::kJoinCgroup, EIO);
    ::execve(argv[0], argv.data(), envp.data());
    child_fail(Stage::kRestore, errno);
  }
  for (int* fd : {&exec_err_[1], &init_status_[1], &out_[1], &err_[1]}) {
    ::close(*fd);
    *fd = -1;
  }
  // CRIU's own run: wait for it to exit, never longer than the restore timeout (a CRIU that hangs
  // is killed, and the start fails), nor once the agent gives the restore up (SIGTERM to the shim).
  int status = 0;
  bool exited = false;
  bool given_up = false;
  const auto deadline = started + milliseconds(spec_.restore_timeout_ms);
  while (steady_clock::now() < deadline && !given_up) {
    const pid_t got = ::waitpid(child, &status, WNOHANG);
    if (got == child) {
      exited = true;
      break;
    }
    given_up = asked_to_stop();
    std::this_thread::sleep_for(milliseconds(5));
  }
  if (!exited) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
  }
  ChildFailure failure;
  if (read_until(exec_err_[0], &failure, sizeof failure, steady_clock::now() + milliseconds(1)) == sizeof failure) {
    const std::string message =
        fmt::format("cannot run CRIU \"{}\" to restore the job: {} at {}", spec_.criu, errno_text(failure.err),
                    stage_name(static_cast<Stage>(failure.stage)));
    fail_start(Error::failed_precondition(message), "restore", failure.err);
    return Error::failed_precondition(message);
  }
  pid_t init = 0;
  if (exited && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    auto text = cgroups::read_file(pid_file);
    if (text) {
      if (auto pid = parse_int(trim(*text), "restore.pid")) init = static_cast<pid_t>(*pid);
    }
  }
  auto stat = jobfiles::read_proc_stat(init);
  if (init <= 0 || !stat || stat->ppid != ::getpid()) {
    const std::string message =
        given_up ? std::string("the restore was given up (the shim was asked to stop; CRIU killed)")
        : !exited ? fmt::format("CRIU did not restore the job within {}ms (killed)", spec_.restore_timeout_ms)
                : fmt::format("CRIU could not restore the job ({}): {}",
                              WIFEXITED(status) ? fmt::format("exit code {}", WEXITSTATUS(status))
                                                : fmt::format("signal {}", WTERMSIG(status)),
                              criu::log_errors(dir_ / "restore.log"));
    if (init > 0 && stat) job_pid_ = init;  // restored but not ours: fail_start kills it
    fail_start(Error::failed_precondition(message), "restore", 0);
    return Error::failed_precondition(message);
  }
  job_pid_ = init;
  restore_took_ = std::chrono::duration_cast<milliseconds>(steady_clock::now() - started);
  return {};
}

// The job never ran: kill whatever got started, record the failure as its exit, tell the agent.
void Shim::fail_start(const Error& error, const std::string& stage, int err) {
  spdlog::error("job start failed job=\"{}\" stage={} error=\"{}\"", spec_.job_id, stage, error.message);
  if (job_pid_ > 0) {
    ::kill(job_pid_, SIGKILL);
    int status = 0;
    ::waitpid(job_pid_, &status, 0);
  }
  if (!spec_.cgroup.empty()) {
    (void)spec_.cgroup.kill_all(kCleanupTimeout);
    (void)spec_.cgroup.remove(kCleanupTimeout);
  }
  jobfiles::ExitRecord record;
  record.exit_code = 127;
  record.error = error.message;
  record.finished_at = output::format_time(std::chrono::system_clock::now());
  if (auto s = jobfiles::write_atomic(dir_, jobfiles::kExit, jobfiles::encode(record)); !s) {
    spdlog::error("exit file not written error=\"{}\"", s.error().to_string());
  }
  ::unlink((dir_ / jobfiles::kControl).c_str());
  report(Json{{"ok", false}, {"stage", stage}, {"errno", err}, {"message", error.message}});
}

void Shim::write_out() {
  std::string_view data = out_buffer_;
  while (!data.empty()) {
    const ssize_t n = ::write(output_fd_, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      // Disk full or broken: the job must not block on it. Drop, and say so once.
      if (dropped_bytes_ == 0) {
        spdlog::error("output write failed job=\"{}\" error=\"{}\"; dropping output", spec_.job_id, errno_text(errno));
      }
      dropped_bytes_ += data.size();
      break;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  out_buffer_.clear();
}

// One read per turn (up to 64 KiB), so that a stream that never pauses cannot starve the other.
void Shim::read_pump(Pump& pump, const char* timestamp) {
  char buffer[kReadBytes];
  ssize_t n;
  do {
    n = ::read(pump.fd, buffer, sizeof buffer);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return;  // EAGAIN: nothing after all
  if (out_buffer_.empty()) out_since_ = steady_clock::now();
  if (n == 0) {
    pump.splitter.finish(timestamp, out_buffer_);
    pump.pending_since.reset();
    ::close(pump.fd);
    pump.fd = -1;
    return;
  }
  pump.splitter.feed(std::string_view(buffer, static_cast<size_t>(n)), timestamp, out_buffer_);
  if (!pump.splitter.has_pending()) {
    pump.pending_since.reset();
  } else if (!pump.pending_since) {
    pump.pending_since = steady_clock::now();
  }
}

void Shim::deliver(int sig) {
  if (job_done_ || job_pid_ <= 0) return;
  // The init forwards it to the command; without namespaces job_pid_ is the command. The pid
  // cannot have been reused: the process is our child and not yet reaped.
  ::kill(job_pid_, sig);
}

void Shim::kill_tree() {
  if (!job_done_) {
    stopped_ = true;
    // SIGKILL to a namespace's init kills the whole namespace; without one, the process group.
    ::kill(spec_.namespaces ? job_pid_ : -job_pid_, SIGKILL);
  }
  if (!spec_.cgroup.empty()) (void)spec_.cgroup.kill_all(milliseconds(0));
}

void Shim::handle_signals() {
  signalfd_siginfo info{};
  while (::read(signal_fd_, &info, sizeof info) == sizeof info) {
    const int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) {
      reap();
    } else {
      // Someone signalled the shim itself: it belongs to the job, which gets the signal.
      spdlog::info("shim signalled job=\"{}\" signal={} from_pid={}; forwarding", spec_.job_id, sig, info.ssi_pid);
      deliver(sig);
    }
  }
}

void Shim::handle_control() {
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(control_fd_, buffer, sizeof buffer)) > 0) control_buffer_.append(buffer, static_cast<size_t>(n));
  size_t newline;
  while ((newline = control_buffer_.find('\n')) != std::string::npos) {
    const std::string command = control_buffer_.substr(0, newline);
    control_buffer_.erase(0, newline + 1);
    if (command == "kill") {
      kill_tree();
    } else if (command.rfind("signal ", 0) == 0) {
      auto sig = parse_int(command.substr(7), "signal");
      if (sig && *sig > 0 && *sig < NSIG) deliver(static_cast<int>(*sig));
    } else {
      spdlog::warn("unknown control command job=\"{}\" command=\"{}\"", spec_.job_id, command);
    }
  }
  if (control_buffer_.size() > 4096) control_buffer_.clear();
}

void Shim::reap() {
  while (true) {
    siginfo_t info{};
    // WNOWAIT first: while the job's process is an unreaped zombie its pid (and, without
    // namespaces, its process group id) stays ours, so the group can be killed without a race.
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
    const pid_t pid = info.si_pid;
    if (pid == job_pid_ && !job_done_) {
      if (!spec_.namespaces) ::kill(-job_pid_, SIGKILL);  // what the command left in its group
      ::waitpid(pid, &job_status_, 0);
      job_done_ = true;
      if (spec_.namespaces) {
        int command_status = 0;
        ::fcntl(init_status_[0], F_SETFL, O_NONBLOCK);
        if (::read(init_status_[0], &command_status, sizeof command_status) == sizeof command_status) {
          job_status_ = command_status;
        }
      }
      // Whatever escaped the process group (or the namespace, by a privileged job) but not the
      // cgroup.
      if (!spec_.cgroup.empty()) (void)spec_.cgroup.kill_all(milliseconds(0));
      drain_deadline_ = steady_clock::now() + kDrainTimeout;
    } else {
      int status = 0;
      ::waitpid(pid, &status, 0);
    }
  }
}

void Shim::loop() {
  while (true) {
    const bool streams_open = stdout_.fd >= 0 || stderr_.fd >= 0;
    if (job_done_ && !streams_open) break;
    auto now = steady_clock::now();
    if (job_done_ && now >= drain_deadline_) {
      spdlog::warn("job ended but its output stays open job=\"{}\"; a process outside its cgroup holds it",
                   spec_.job_id);
      break;
    }
    int timeout = -1;
    auto until = [&](steady_clock::time_point when) {
      const auto ms = std::max<int64_t>(0, std::chrono::ceil<milliseconds>(when - now).count());
      timeout = timeout < 0 ? static_cast<int>(ms) : std::min(timeout, static_cast<int>(ms));
    };
    if (!out_buffer_.empty()) until(out_since_ + kFlushDelay);
    for (Pump* pump : {&stdout_, &stderr_}) {
      if (pump->pending_since) until(*pump->pending_since + kPartialDelay);
    }
    if (job_done_) until(drain_deadline_);

    std::array<pollfd, 4> fds{};
    size_t count = 0;
    fds[count++] = {signal_fd_, POLLIN, 0};
    fds[count++] = {control_fd_, POLLIN, 0};
    const size_t first_pump = count;
    for (Pump* pump : {&stdout_, &stderr_}) fds[count++] = {pump->fd, POLLIN, 0};  // fd -1 is skipped
    const int ready = ::poll(fds.data(), count, timeout);
    if (ready < 0 && errno != EINTR) {
      spdlog::error("poll failed error=\"{}\"", errno_text(errno));
      break;
    }
    const char* stamp = now_stamp();
    now = steady_clock::now();
    if (ready > 0) {
      if (fds[0].revents) handle_signals();
      if (fds[1].revents) handle_control();
      Pump* pumps[] = {&stdout_, &stderr_};
      for (size_t i = 0; i < 2; ++i) {
        if (pumps[i]->fd >= 0 && fds[first_pump + i].revents) read_pump(*pumps[i], stamp);
      }
    }
    for (Pump* pump : {&stdout_, &stderr_}) {
      if (pump->pending_since && now - *pump->pending_since >= kPartialDelay) {
        if (out_buffer_.empty()) out_since_ = now;
        pump->splitter.flush_partial(stamp, out_buffer_);
        // What stays held is a character cut in two: wait for its end as for a new line.
        pump->pending_since = pump->splitter.has_pending() ? std::optional(now) : std::nullopt;
      }
    }
    if (out_buffer_.size() >= kFlushBytes || (!out_buffer_.empty() && now - out_since_ >= kFlushDelay)) {
      write_out();
    }
  }
}

void Shim::finish() {
  const char* stamp = now_stamp();
  for (Pump* pump : {&stdout_, &stderr_}) {
    pump->splitter.finish(stamp, out_buffer_);
    if (pump->fd >= 0) ::close(pump->fd);
    pump->fd = -1;
  }
  write_out();
  // Output before exit.json: once a reader sees the exit, the output is complete.
  ::fsync(output_fd_);

  jobfiles::ExitRecord record;
  if (WIFEXITED(job_status_)) record.exit_code = WEXITSTATUS(job_status_);
  if (WIFSIGNALED(job_status_)) record.signal = WTERMSIG(job_status_);
  record.stopped = stopped_;
  if (!spec_.cgroup.empty()) {
    record.oom_kills = spec_.cgroup.oom_kills();
    if (auto s = spec_.cgroup.kill_all(kCleanupTimeout); !s) {
      spdlog::error("cgroup not emptied job=\"{}\" error=\"{}\"", spec_.job_id, s.error().to_string());
    }
    if (auto s = spec_.cgroup.remove(kCleanupTimeout); !s) {
      spdlog::error("cgroup not removed job=\"{}\" error=\"{}\"", spec_.job_id, s.error().to_string());
    }
  }
  // Orphans of the job were re-parented to us (the subreaper) and killed above: reap them, or
  // they would outlive us as zombies. Something that left the job's process group and cgroup
  // keeps running; we do not wait for it past the timeout.
  for (const auto deadline = steady_clock::now() + kReapTimeout; ::waitpid(-1, nullptr, WNOHANG) >= 0;) {
    if (steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(milliseconds(2));
  }
  record.oom_killed = record.oom_kills > 0 && record.signal == SIGKILL && !stopped_;
  if (dropped_bytes_ > 0) record.error = fmt::format("{} bytes of output were lost (write failed)", dropped_bytes_);
  record.finished_at = output::format_time(std::chrono::system_clock::now());
  if (auto s = jobfiles::write_atomic(dir_, jobfiles::kExit, jobfiles::encode(record)); !s) {
    spdlog::error("exit file not written job=\"{}\" error=\"{}\"", spec_.job_id, s.error().to_string());
  }
  ::unlink((dir_ / jobfiles::kControl).c_str());
  spdlog::info("job ended job=\"{}\" exit_code={} signal={} oom_killed={} stopped={}", spec_.job_id,
               record.exit_code.value_or(-1), record.signal.value_or(0), record.oom_killed, record.stopped);
}

int Shim::run() {
  ::signal(SIGPIPE, SIG_IGN);
  // Orphans of the job (and the init, once the middle process exits) become our children.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  sigset_t handled;
  sigemptyset(&handled);
  for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) sigaddset(&handled, sig);
  ::sigprocmask(SIG_BLOCK, &handled, nullptr);
  signal_fd_ = ::signalfd(-1, &handled, SFD_NONBLOCK | SFD_CLOEXEC);
  if (signal_fd_ < 0) {
    const Error error = Error::internal("signalfd: " + errno_text(errno));
    fail_start(error, "shim", errno);
    return 1;
  }
  if (auto s = prepare(); !s) {
    fail_start(s.error(), "shim", 0);
    return 1;
  }
  if (auto s = launch(); !s) return 1;

  jobfiles::ShimState state;
  state.shim_pid = ::getpid();
  state.job_pid = job_pid_;
  state.pid_namespace = spec_.namespaces;
  state.stdout_pipe = pipe_inode(out_[0]);
  state.stderr_pipe = pipe_inode(err_[0]);
  state.status_pipe = pipe_inode(init_status_[0]);
  if (auto stat = jobfiles::read_proc_stat(state.shim_pid)) state.shim_start_time = stat->start_time;
  if (auto stat = jobfiles::read_proc_stat(job_pid_)) state.job_start_time = stat->start_time;
  if (auto s = jobfiles::write_atomic(dir_, jobfiles::kState, jobfiles::encode(state)); !s) {
    // Without state.json a restarted agent cannot adopt the job; the job still runs to its end.
    spdlog::error("state file not written job=\"{}\" error=\"{}\"", spec_.job_id, s.error().to_string());
  }
  spdlog::info("job started job=\"{}\" shim_pid={} job_pid={} namespaces={} cgroups={}", spec_.job_id, state.shim_pid,
               job_pid_, spec_.namespaces, to_string(spec_.cgroup.version));
  Json started{{"ok", true}, {"shim_pid", state.shim_pid}, {"job_pid", job_pid_}};
  if (!spec_.restore_from.empty()) started["restore_ms"] = restore_took_.count();
  report(started);
  loop();
  finish();
  return 0;
}

}  // namespace

int shim_main(int argc, char** argv) {
  auto logger = spdlog::stderr_logger_st("shim");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %l shim: %v", spdlog::pattern_time_type::utc);
  spdlog::set_default_logger(logger);
  std::string job_dir;
  int status_fd = -1;
  bool init = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == kInitFlag) {
      init = true;
    } else if (arg == jobfiles::kJobDirFlag && i + 1 < argc) {
      job_dir = argv[++i];
    } else if (arg == jobfiles::kStatusFdFlag && i + 1 < argc) {
      auto fd = parse_int(argv[++i], "--status-fd");
      if (!fd || *fd < 0 || *fd > 1024) {
        spdlog::error("--status-fd \"{}\": a descriptor number expected", argv[i]);
        return 2;
      }
      status_fd = static_cast<int>(*fd);
    } else {
      spdlog::error("argument \"{}\": expected --job-dir DIR [--status-fd N]", arg);
      return 2;
    }
  }
  if (job_dir.empty() || job_dir[0] != '/') {
    spdlog::error("--job-dir \"{}\": an absolute path is required", job_dir);
    return 2;
  }
  if (init) init_main(job_dir);
  // Not to pin whatever directory the agent was started in.
  (void)!::chdir("/");
  Shim shim(job_dir, status_fd);
  return shim.run();
}

}  // namespace cnlab::agent
