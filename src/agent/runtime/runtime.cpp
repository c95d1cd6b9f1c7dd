// The agent's side of the runtime: detection, start (through the shim), adopt, status, signals
// and stop.
#include "agent/runtime/runtime.h"

#include <fcntl.h>
#include <grp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "agent/runtime/cgroups.h"
#include "agent/runtime/criu.h"
#include "agent/runtime/cuda_checkpoint.h"
#include "agent/runtime/job_files.h"
#include "agent/runtime/output_format.h"
#include "common/json_reader.h"
#include "common/strings.h"

extern char** environ;

namespace cnlab::agent {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

// Everything a handle needs, fixed when the job is started or adopted.
struct JobRecord {
  std::string job_id;
  fs::path job_dir;
  RuntimeCapabilities isolation;
  cgroups::JobCgroup cgroup;
  bool namespaces = false;
  pid_t shim_pid = 0;
  uint64_t shim_start_time = 0;
  pid_t job_pid = 0;
  uint64_t job_start_time = 0;
  std::string no_state_reason;  // set when adopt() found no state.json
  std::string criu;             // empty: the runtime has no working CRIU
  milliseconds checkpoint_timeout{120000};
  std::string cuda_tool;        // cuda-checkpoint, when GPU state is checkpointed; else empty
};

namespace {

constexpr size_t kMaxCgroupName = 64;
constexpr milliseconds kLazyPagesLimit = std::chrono::minutes(30);  // a post-copy's pages, all of them
constexpr milliseconds kLazyPagesStart{30000};  // for `criu lazy-pages` to reach the page server
constexpr size_t kMaxHostname = 63;
constexpr milliseconds kGiveUpCheck{100};  // how often start() asks ProcessSpec::give_up_restore
constexpr milliseconds kWaitStep{50};  // how often wait() re-checks that the shim is alive
constexpr milliseconds kRemoveTimeout{1000};

std::string errno_text(int err) { return std::strerror(err); }

// What start() fails with when ProcessSpec::give_up_restore said so.
Error restore_given_up(const std::string& job_id) {
  return Error::of(ErrorCode::kFailedPrecondition, "job", job_id, "its restore was given up before it ended");
}

// `criu lazy-pages` for a post-copy restore of `images`: it pulls the pages from `from` while the
// restored job runs, and exits once it has them all. A thread of the agent's reaps it (killing it
// past kLazyPagesLimit, or once the flag returned is set: the restore it serves did not happen)
// and logs how it ended. `give_up` ends the wait for it to be ready.
Result<std::shared_ptr<std::atomic<bool>>> start_lazy_pages(const std::string& criu, const fs::path& images,
                                                             const HostPort& from, const std::string& job_id,
                                                             const std::function<bool()>& give_up) {
  const fs::path log = images / kLazyPagesLog;
  const auto started = std::chrono::steady_clock::now();
  auto pid = criu::spawn(criu::lazy_pages_args(criu, images, log, from));
  if (!pid) return pid.error();
  auto kill_it = [&](Error why) {
    ::kill(*pid, SIGKILL);
    ::waitpid(*pid, nullptr, 0);
    return why;
  };
  // The restore connects to the daemon's socket in the images directory once, without retrying:
  // it starts only once the socket is there (the daemon has reached the page server by then).
  const fs::path socket = images / "lazy-pages.socket";
  std::error_code ec;
  while (!fs::exists(socket, ec)) {
    int status = 0;
    if (::waitpid(*pid, &status, WNOHANG) == *pid) {
      return Error::of(ErrorCode::kUnavailable, "pages_from", format_host_port(from),
                       "criu lazy-pages could not start: " + criu::log_errors(log));
    }
    if (std::chrono::steady_clock::now() - started > kLazyPagesStart) {
      return kill_it(Error::of(ErrorCode::kUnavailable, "pages_from", format_host_port(from),
                               fmt::format("criu lazy-pages was not ready within {}ms: {}", kLazyPagesStart.count(),
                                           criu::log_errors(log))));
    }
    if (give_up && give_up()) return kill_it(restore_given_up(job_id));
    std::this_thread::sleep_for(milliseconds(5));
  }
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  std::thread([pid = *pid, started, log, job_id, cancelled] {
    criu::RunResult ran = criu::wait(pid, started, kLazyPagesLimit, [&] { return cancelled->load(); });
    if (ran.exit_code == 0) {
      spdlog::info("job pages pulled job=\"{}\" took_ms={}", job_id, ran.took.count());
    } else if (cancelled->load()) {
      spdlog::info("job page pull stopped job=\"{}\": the restore did not happen", job_id);
    } else {
      const std::string why = ran.timed_out ? "timed out" : criu::log_errors(log);
      spdlog::error("job pages not all pulled job=\"{}\" error=\"{}\"", job_id, why);
      std::ofstream(log.parent_path() / kPagesNotPulledFile) << why;  // for the job's end
    }
  }).detach();
  return cancelled;
}

constexpr int kCapSysResource = 24;

// Whether this process holds capability `bit` (its effective set, from /proc/self/status).
bool has_capability(int bit) {
  auto status = cgroups::read_file("/proc/self/status");
  if (!status) return false;
  for (auto line : split(*status, '\n')) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    const uint64_t caps = std::strtoull(std::string(trim(line.substr(7))).c_str(), nullptr, 16);
    return (caps >> bit) & 1;
  }
  return false;
}

// Shims this process started are its children until they exit: they must be reaped, or each
// finished job would leave a zombie in the agent. Process-wide, because handles outlive the
// Runtime that started them. pidfds, not pids: a pidfd names its process even after another part
// of the agent has reaped it (waitpid(-1)) and the pid was reused.
class ShimReaper {
 public:
  static ShimReaper& instance() {
    static ShimReaper reaper;
    return reaper;
  }
  void track(pid_t pid) {
    const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (fd < 0) return;  // pre-5.3 kernel: the shim is left to the process's own reaping
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    std::lock_guard lock(mutex_);
    pidfds_.push_back(fd);
  }
  void reap() {
    std::lock_guard lock(mutex_);
    std::erase_if(pidfds_, [](int fd) {
      siginfo_t info{};
      const int rc = ::waitid(P_PIDFD, static_cast<id_t>(fd), &info, WEXITED | WNOHANG);
      // Reaped now (si_pid set), or already by someone else (ECHILD): either way, done.
      if ((rc == 0 && info.si_pid != 0) || (rc != 0 && errno == ECHILD)) {
        ::close(fd);
        return true;
      }
      return false;
    });
  }

 private:
  std::mutex mutex_;
  std::vector<int> pidfds_;
};

bool allowed_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

uint32_t fnv1a(std::string_view text) {
  uint32_t hash = 2166136261u;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 16777619u;
  }
  return hash;
}

bool valid_utf8(std::string_view text) {
  std::string sanitized;
  output::append_utf8_sanitized(sanitized, text);
  return sanitized.size() == text.size();
}

Status check_text(std::string_view field, std::string_view value) {
  if (value.find('\0') != std::string_view::npos) {
    return Error::invalid_argument(std::string(field), std::string(value), "must not contain NUL bytes");
  }
  if (!valid_utf8(value)) return Error::invalid_argument(std::string(field), "", "must be valid UTF-8");
  return {};
}

Status validate(const ProcessSpec& spec) {
  if (spec.job_id.empty()) return Error::invalid_argument("job_id", "", "required");
  if (spec.argv.empty()) return Error::invalid_argument("argv", "[]", "a command is required");
  if (spec.argv[0].empty()) return Error::invalid_argument("argv[0]", "", "a program name or path is required");
  for (size_t i = 0; i < spec.argv.size(); ++i) {
    if (auto s = check_text(fmt::format("argv[{}]", i), spec.argv[i]); !s) return s;
  }
  for (size_t i = 0; i < spec.env.size(); ++i) {
    const std::string field = fmt::format("env[{}]", i);
    if (auto s = check_text(field, spec.env[i]); !s) return s;
    const size_t equals = spec.env[i].find('=');
    if (equals == std::string::npos || equals == 0) {
      return Error::invalid_argument(field, spec.env[i], "KEY=VALUE expected, with a non-empty KEY");
    }
  }
  if (spec.job_dir.empty() || !spec.job_dir.is_absolute()) {
    return Error::invalid_argument("job_dir", spec.job_dir.string(), "an absolute path is required");
  }
  if (!spec.working_dir.empty()) {
    if (auto s = check_text("working_dir", spec.working_dir); !s) return s;
    if (spec.working_dir[0] != '/') {
      return Error::invalid_argument("working_dir", spec.working_dir, "an absolute path (or empty: the job directory)");
    }
  }
  for (size_t i = 0; i < spec.view_mounts.size(); ++i) {
    const ViewMount& mount = spec.view_mounts[i];
    if (!mount.source.is_absolute()) {
      return Error::invalid_argument(fmt::format("view_mounts[{}].source", i), mount.source.string(),
                                     "an absolute path is required");
    }
    const fs::path view(mount.view);
    const fs::path relative = view.lexically_relative(kJobViewRoot);
    if (!view.is_absolute() || relative.empty() || *relative.begin() == ".." || *relative.begin() == "." ||
        mount.view.find("/..") != std::string::npos) {
      return Error::invalid_argument(fmt::format("view_mounts[{}].view", i), mount.view,
                                     fmt::format("a path under {} without \"..\"", kJobViewRoot));
    }
  }
  const std::pair<const char*, int64_t> limits[] = {{"limits.cpu_milli", spec.limits.cpu_milli},
                                                    {"limits.memory_bytes", spec.limits.memory_bytes},
                                                    {"limits.pids", spec.limits.pids}};
  for (const auto& [field, value] : limits) {
    if (value < 0) return Error::invalid_argument(field, std::to_string(value), "0 (no limit) or more");
  }
  if (!spec.cgroup_name.empty()) {
    const bool ok = spec.cgroup_name.size() <= 128 && spec.cgroup_name[0] != '.' &&
                    std::all_of(spec.cgroup_name.begin(), spec.cgroup_name.end(), allowed_name_char);
    if (!ok) {
      return Error::invalid_argument("cgroup_name", spec.cgroup_name,
                                     "letters, digits, '.', '_' and '-', not starting with '.', at most 128 "
                                     "(or empty: derived from job_id)");
    }
  }
  if (!spec.hostname.empty()) {
    const bool ok =
        spec.hostname.size() <= kMaxHostname && std::all_of(spec.hostname.begin(), spec.hostname.end(),
                                                            [](char c) { return allowed_name_char(c) && c != '_'; });
    if (!ok) {
      return Error::invalid_argument("hostname", spec.hostname,
                                     "letters, digits, '.' and '-', at most 63 (or empty: from the job id)");
    }
  }
  return {};
}

struct ResolvedUser {
  bool switch_user = false;
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;
};

struct PasswdEntry {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
};

// getpwnam_r / getpwuid_r with a growing buffer. nullopt when there is no such entry.
std::optional<PasswdEntry> lookup_passwd(const std::string* name, uid_t uid) {
  std::vector<char> buffer(16384);
  while (true) {
    passwd entry{};
    passwd* found = nullptr;
    const int rc = name ? ::getpwnam_r(name->c_str(), &entry, buffer.data(), buffer.size(), &found)
                        : ::getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found);
    if (rc == ERANGE && buffer.size() < (1u << 22)) {
      buffer.resize(buffer.size() * 2);
      continue;
    }
    if (rc != 0 || found == nullptr) return std::nullopt;
    return PasswdEntry{found->pw_name, found->pw_uid, found->pw_gid};
  }
}

Result<ResolvedUser> resolve_user(const RunAs& run_as, bool can_switch) {
  ResolvedUser user;
  if (run_as.empty()) return user;
  std::optional<PasswdEntry> entry;
  if (!run_as.user.empty()) {
    entry = lookup_passwd(&run_as.user, 0);
    if (!entry) return Error::invalid_argument("run_as.user", run_as.user, "no such user on this node");
    if (run_as.uid && *run_as.uid != entry->uid) {
      return Error::invalid_argument("run_as.uid", std::to_string(*run_as.uid),
                                     fmt::format("user \"{}\" has uid {}", run_as.user, entry->uid));
    }
  } else if (run_as.uid) {
    entry = lookup_passwd(nullptr, *run_as.uid);
  } else {
    return Error::invalid_argument("run_as.gid", std::to_string(*run_as.gid), "a user (name or uid) is needed too");
  }
  user.uid = entry ? entry->uid : *run_as.uid;
  if (run_as.gid)
    user.gid = *run_as.gid;
  else if (entry)
    user.gid = entry->gid;
  else {
    return Error::invalid_argument("run_as.gid", "",
                                   fmt::format("required: uid {} has no passwd entry to take a group from", user.uid));
  }
  if (entry) {
    int count = 64;
    std::vector<gid_t> groups(static_cast<size_t>(count));
    if (::getgrouplist(entry->name.c_str(), user.gid, groups.data(), &count) < 0) {
      groups.resize(static_cast<size_t>(count));
      ::getgrouplist(entry->name.c_str(), user.gid, groups.data(), &count);
    }
    groups.resize(static_cast<size_t>(std::max(count, 0)));
    user.groups.assign(groups.begin(), groups.end());
  }
  if (user.groups.empty()) user.groups.push_back(user.gid);
  user.switch_user = user.uid != ::geteuid() || user.gid != ::getegid();
  if (user.switch_user && !can_switch) {
    return Error::of(
        ErrorCode::kFailedPrecondition, "run_as", std::to_string(user.uid),
        fmt::format("running as uid {} needs the agent to run as root (it runs as uid {})", user.uid, ::geteuid()));
  }
  return user;
}

// Forks a child that tries what the shim will do: unshare the namespaces, then, as PID 1 of the
// new one, make mounts private and mount a fresh /proc. Empty when all works, else why not.
// Only raw system calls in the children, as the agent is multi-threaded.
std::string probe_namespaces() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return "pipe: " + errno_text(errno);
  const pid_t child = ::fork();
  if (child < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return "fork: " + errno_text(errno);
  }
  if (child == 0) {
    int32_t failure[2] = {0, 0};
    if (::unshare(CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS) != 0) {
      failure[0] = 1;
      failure[1] = errno;
    } else {
      const pid_t init = ::fork();
      if (init == 0) {
        if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
          failure[0] = 2;
          failure[1] = errno;
        } else if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
          failure[0] = 3;
          failure[1] = errno;
        }
        if (failure[0] != 0) (void)!::write(fds[1], failure, sizeof failure);
        ::_exit(0);
      }
      if (init < 0) {
        failure[0] = 4;
        failure[1] = errno;
      } else {
        int status = 0;
        ::waitpid(init, &status, 0);
      }
    }
    if (failure[0] != 0) (void)!::write(fds[1], failure, sizeof failure);
    ::_exit(0);
  }
  ::close(fds[1]);
  int32_t failure[2] = {0, 0};
  pollfd pfd{fds[0], POLLIN, 0};
  std::string reason;
  if (::poll(&pfd, 1, 5000) <= 0) {
    ::kill(child, SIGKILL);
    reason = "the namespace probe did not finish within 5s";
  } else if (::read(fds[0], failure, sizeof failure) == sizeof failure) {
    static constexpr const char* kSteps[] = {"", "unshare(pid, mount, ipc, uts)", "mount --make-rprivate /",
                                             "mount proc", "fork"};
    reason = fmt::format("{}: {}", kSteps[failure[0] >= 1 && failure[0] <= 4 ? failure[0] : 0], errno_text(failure[1]));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  return reason;
}

std::string default_hostname(const std::string& cgroup_name) {
  std::string host = cgroup_name.substr(0, kMaxHostname);
  std::replace(host.begin(), host.end(), '_', '-');
  while (!host.empty() && (host.front() == '-' || host.front() == '.')) host.erase(host.begin());
  return host.empty() ? "job" : host;
}

// Reads exit.json: nullopt while there is none (or one the job planted: not ours).
std::optional<JobStatus> read_exit(const JobRecord& record) {
  auto text = jobfiles::read_trusted(record.job_dir / jobfiles::kExit);
  if (!text) {
    if (text.error().code == ErrorCode::kPermissionDenied) {
      spdlog::warn("ignoring exit file not written by the runtime job=\"{}\" error=\"{}\"", record.job_id,
                   text.error().to_string());
    }
    return std::nullopt;
  }
  auto exit = jobfiles::decode_exit(*text);
  if (!exit) {
    JobStatus status;
    status.state = JobState::kExited;
    status.error = "exit.json does not decode: " + exit.error().to_string();
    return status;
  }
  return jobfiles::to_status(*exit);
}

// Whether the shim is still the process that state.json names (pid and start time), and not a
// zombie.
bool shim_alive(const JobRecord& record) {
  if (record.shim_pid <= 0) return false;
  const auto stat = jobfiles::read_proc_stat(record.shim_pid);
  if (!stat) return false;
  if (record.shim_start_time != 0 && stat->start_time != record.shim_start_time) return false;
  return stat->state != 'Z' && stat->state != 'X';
}

JobStatus status_of(const JobRecord& record) {
  ShimReaper::instance().reap();
  if (auto exited = read_exit(record)) return *exited;
  if (shim_alive(record)) return JobStatus{};
  // The shim may have written exit.json and exited between the two reads.
  if (auto exited = read_exit(record)) return *exited;
  JobStatus lost;
  lost.state = JobState::kLost;
  lost.error = !record.no_state_reason.empty()
                   ? record.no_state_reason
                   : fmt::format("the job's shim (pid {}) is gone and left no exit.json", record.shim_pid);
  return lost;
}

Status send_control(const JobRecord& record, std::string_view command) {
  const fs::path path = record.job_dir / jobfiles::kControl;
  const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    // ENXIO: a FIFO nobody reads (the shim is gone); ENOENT: the shim removed it at the end.
    if (err == ENXIO || err == ENOENT) {
      return Error::of(ErrorCode::kFailedPrecondition, "job", record.job_id, "is not running (its shim is gone)");
    }
    return Error::of(ErrorCode::kUnavailable, "file", path.string(), "open: " + errno_text(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode) || st.st_uid != ::geteuid()) {
    ::close(fd);
    return Error::of(ErrorCode::kPermissionDenied, "file", path.string(), "not the runtime's control FIFO");
  }
  const std::string line = std::string(command) + "\n";
  const ssize_t n = ::write(fd, line.data(), line.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(line.size())) {
    return Error::of(ErrorCode::kUnavailable, "file", path.string(),
                     "write: " + (n < 0 ? errno_text(err) : std::string("short write")));
  }
  return {};
}

void remove_cgroup(const JobRecord& record) {
  if (record.cgroup.empty()) return;
  if (auto s = record.cgroup.remove(kRemoveTimeout); !s) {
    spdlog::warn("job cgroup not removed job=\"{}\" error=\"{}\"", record.job_id, s.error().to_string());
  }
}

}  // namespace

std::string_view to_string(CgroupVersion version) {
  switch (version) {
    case CgroupVersion::kNone: return "none";
    case CgroupVersion::kV1: return "v1";
    case CgroupVersion::kV2: return "v2";
  }
  return "none";
}

std::string_view to_string(JobState state) {
  switch (state) {
    case JobState::kRunning: return "running";
    case JobState::kExited: return "exited";
    case JobState::kLost: return "lost";
  }
  return "lost";
}

std::string cgroup_name_for(std::string_view job_id) {
  std::string name;
  bool changed = false;
  for (char c : job_id) {
    if (allowed_name_char(c)) {
      name.push_back(c);
    } else {
      name.push_back('_');
      changed = true;
    }
  }
  // "." and ".." are not names, and a leading dot hides a directory.
  if (!name.empty() && name[0] == '.') {
    name[0] = '_';
    changed = true;
  }
  const std::string suffix = fmt::format("-{:08x}", fnv1a(job_id));
  if (name.size() > kMaxCgroupName) {
    name.resize(kMaxCgroupName - suffix.size());
    changed = true;
  }
  if (name.empty()) return "job" + suffix;
  if (changed) name += suffix;
  return name;
}

// ---------------------------------------------------------------------------------------------
// JobHandle

JobHandle::JobHandle(std::shared_ptr<const JobRecord> record) : record_(std::move(record)) {}

const std::string& JobHandle::job_id() const { return record_->job_id; }
const fs::path& JobHandle::job_dir() const { return record_->job_dir; }
fs::path JobHandle::output_path() const { return record_->job_dir / jobfiles::kOutput; }
const RuntimeCapabilities& JobHandle::isolation() const { return record_->isolation; }
pid_t JobHandle::shim_pid() const { return record_->shim_pid; }

JobStatus JobHandle::status() const { return status_of(*record_); }

JobStatus JobHandle::wait(milliseconds timeout) const {
  const auto deadline = steady_clock::now() + timeout;
  // exit.json arrives by rename: inotify wakes us for it; the step bounds how late a lost shim
  // (which writes nothing) is noticed.
  int inotify_fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (inotify_fd >= 0 && ::inotify_add_watch(inotify_fd, record_->job_dir.c_str(), IN_MOVED_TO | IN_CREATE) < 0) {
    ::close(inotify_fd);
    inotify_fd = -1;
  }
  JobStatus status = status_of(*record_);
  while (status.state == JobState::kRunning) {
    const auto now = steady_clock::now();
    if (now >= deadline) break;
    const auto step = std::min<milliseconds>(std::chrono::ceil<milliseconds>(deadline - now),
                                             inotify_fd >= 0 ? kWaitStep : milliseconds(10));
    if (inotify_fd >= 0) {
      pollfd pfd{inotify_fd, POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(step.count())) > 0) {
        char events[4096];
        while (::read(inotify_fd, events, sizeof events) > 0) {
        }
      }
    } else {
      std::this_thread::sleep_for(step);
    }
    status = status_of(*record_);
  }
  if (inotify_fd >= 0) ::close(inotify_fd);
  return status;
}

Status JobHandle::signal(int sig) const {
  if (sig <= 0 || sig >= NSIG) {
    return Error::invalid_argument("signal", std::to_string(sig), fmt::format("allowed: 1..{}", NSIG - 1));
  }
  const JobStatus status = status_of(*record_);
  if (status.state != JobState::kRunning) {
    return Error::of(ErrorCode::kFailedPrecondition, "job", record_->job_id,
                     fmt::format("is {}, not running", to_string(status.state)));
  }
  return send_control(*record_, fmt::format("signal {}", sig));
}

namespace {

// The children of every thread of `pid`.
std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> pids;
  std::error_code ec;
  for (const auto& task : fs::directory_iterator(fmt::format("/proc/{}/task", pid), ec)) {
    auto children = cgroups::read_file(task.path() / "children");
    if (!children) continue;
    for (auto child : split(trim(*children), ' ')) {
      if (auto child_pid = parse_int(child, "pid")) pids.push_back(static_cast<pid_t>(*child_pid));
    }
  }
  return pids;
}

// The init of a job's PID namespace and every process below it.
std::vector<pid_t> tree_of(pid_t root) {
  std::vector<pid_t> pids{root};
  for (size_t i = 0; i < pids.size(); ++i) {
    for (pid_t child : children_of(pids[i])) pids.push_back(child);
  }
  return pids;
}

// Sends `sig` to `pid`, a child of `parent`, if that process has a handler for it (SigCgt in its
// status); false where it has none, or has gone. Through a pidfd, so that a pid reused meanwhile
// is never signalled: the status read names the pidfd's process while it lives.
bool signal_if_caught(pid_t pid, pid_t parent, int sig) {
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return false;
  bool sent = false;
  const auto status = cgroups::read_file(fmt::format("/proc/{}/status", pid));
  const auto field = [&](std::string_view name) -> std::string {
    const size_t at = status ? status->find(fmt::format("\n{}:\t", name)) : std::string::npos;
    if (at == std::string::npos) return "";
    const size_t from = at + name.size() + 3;
    return status->substr(from, status->find('\n', from) - from);
  };
  const std::string caught = field("SigCgt");
  if (field("PPid") == std::to_string(parent) && !caught.empty()) {
    const uint64_t mask = std::strtoull(caught.c_str(), nullptr, 16);
    if ((mask >> (sig - 1)) & 1) sent = ::syscall(SYS_pidfd_send_signal, fd, sig, nullptr, 0) == 0;
  }
  ::close(fd);
  return sent;
}

}  // namespace

Result<int64_t> JobHandle::memory_bytes() const {
  const JobRecord& record = *record_;
  if (status_of(record).state != JobState::kRunning || record.job_pid <= 0) {
    return Error::failed_precondition("job " + record.job_id + " is not running");
  }
  int64_t kib = 0;
  for (pid_t pid : tree_of(record.job_pid)) {
    const auto status = cgroups::read_file(fmt::format("/proc/{}/status", pid));
    if (!status) continue;  // gone meanwhile
    for (std::string_view field : {"\nRssAnon:", "\nRssShmem:"}) {
      const size_t at = status->find(field);
      if (at != std::string::npos) kib += std::strtoll(status->c_str() + at + field.size(), nullptr, 10);
    }
  }
  return kib * 1024;
}

// The outermost processes of the job that catch SIGUSR1, so that a wrapper (`sh run.sh`) does not
// keep the signal from the program it starts, and a program's own workers (forked with its
// handler) do not save a second time. SIGUSR1's default action ends a process: one without a
// handler is never sent it.
Status JobHandle::send_checkpoint_signal() const {
  const JobRecord& record = *record_;
  if (status_of(record).state != JobState::kRunning || record.job_pid <= 0) {
    return Error::failed_precondition("job " + record.job_id + " is not running");
  }
  std::vector<std::pair<pid_t, pid_t>> pending;  // (pid, its parent)
  if (record.namespaces) {
    for (pid_t child : children_of(record.job_pid)) pending.emplace_back(child, record.job_pid);
  } else if (auto stat = jobfiles::read_proc_stat(record.job_pid)) {
    pending.emplace_back(record.job_pid, stat->ppid);
  }
  int sent = 0;
  while (!pending.empty()) {
    const auto [pid, parent] = pending.back();
    pending.pop_back();
    if (signal_if_caught(pid, parent, SIGUSR1)) {
      ++sent;
      continue;
    }
    for (pid_t child : children_of(pid)) pending.emplace_back(child, pid);
  }
  if (sent == 0) {
    return Error::failed_precondition("no process of job " + record.job_id +
                                      " handles SIGUSR1, the checkpoint signal, so none was sent (it would have "
                                      "ended the job); a job saves its own state only if it catches it");
  }
  spdlog::info("job checkpoint signal sent job=\"{}\" processes={}", record.job_id, sent);
  return {};
}

namespace {

// The processes of a job that may hold a CUDA context: the tree but the namespace's init (the
// runtime's own), and only those that see a GPU (cuda::may_hold_context), so that a job without
// GPUs costs no call of the utility.
std::vector<pid_t> cuda_candidates(const JobRecord& record) {
  std::vector<pid_t> pids;
  for (pid_t pid : tree_of(record.job_pid)) {
    if ((pid != record.job_pid || !record.namespaces) && cuda::may_hold_context(pid)) pids.push_back(pid);
  }
  return pids;
}

// Before a dump: the job's CUDA processes' GPU state into their host memory (none without the
// tool); how many processes were suspended.
Result<int> suspend_cuda(const JobRecord& record) {
  if (record.cuda_tool.empty()) return 0;
  auto suspended = cuda::suspend(record.cuda_tool, cuda_candidates(record), record.checkpoint_timeout);
  if (!suspended) {
    return Error::of(ErrorCode::kFailedPrecondition, "job", record.job_id,
                     "its GPU state could not be suspended for the dump: " + suspended.error().message);
  }
  if (*suspended > 0) spdlog::info("job CUDA state suspended job=\"{}\" processes={}", record.job_id, *suspended);
  return *suspended;
}

// After a dump that leaves the job running, a thaw or a restore: back onto the GPUs.
Status resume_cuda(const JobRecord& record, const cuda::DeviceMap& map) {
  if (record.cuda_tool.empty() || record.job_pid <= 0) return {};
  auto resumed = cuda::resume(record.cuda_tool, cuda_candidates(record), map, record.checkpoint_timeout);
  if (!resumed) {
    spdlog::error("job CUDA state not resumed job=\"{}\" error=\"{}\"", record.job_id, resumed.error().message);
    return Error::of(ErrorCode::kFailedPrecondition, "job", record.job_id,
                     "its GPU state could not be resumed: " + resumed.error().message);
  }
  if (*resumed > 0) {
    spdlog::info("job CUDA state resumed job=\"{}\" processes={} device_map=\"{}\"", record.job_id, *resumed,
                 cuda::device_map_argument(map));
  }
  return {};
}

}  // namespace

Result<std::vector<std::string>> JobHandle::prepare_dump(const fs::path& images) const {
  const JobRecord& record = *record_;
  if (record.criu.empty()) {
    return Error::failed_precondition("job " + record.job_id + ": this runtime takes no transparent checkpoints");
  }
  if (!record.namespaces) {
    return Error::failed_precondition("job " + record.job_id +
                                      " has no PID namespace of its own: CRIU dumps a job only as a whole namespace");
  }
  if (status_of(record).state != JobState::kRunning) {
    return Error::failed_precondition("job " + record.job_id + " is not running");
  }
  auto state_text = jobfiles::read_trusted(record.job_dir / jobfiles::kState);
  if (!state_text) return state_text.error();
  auto state = jobfiles::decode_state(*state_text);
  if (!state) return state.error();
  std::error_code ec;
  if (!fs::create_directory(images, ec) || ec) {
    return Error::of(ErrorCode::kAlreadyExists, "images", images.string(),
                     ec ? "mkdir: " + ec.message() : "exists: a checkpoint is written into a new directory");
  }
  ::chmod(images.c_str(), 0700);
  const criu::Pipes pipes{state->stdout_pipe, state->stderr_pipe, state->status_pipe};
  if (auto written = jobfiles::write_atomic(images, criu::kPipesFile, criu::encode(pipes)); !written) {
    return written.error();
  }
  std::ifstream in(fmt::format("/proc/{}/mountinfo", record.job_pid));
  const std::string mountinfo((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> external = criu::external_mounts(mountinfo);
  if (!external.empty()) {
    spdlog::info("job mounts dumped as external job=\"{}\" mounts=\"{}\"", record.job_id, fmt::join(external, ","));
  }
  if (auto written = jobfiles::write_atomic(images, criu::kExternalMountsFile, criu::encode_mounts(external)); !written) {
    return written.error();
  }
  return external;
}

static uint64_t images_bytes(const fs::path& images) {
  uint64_t bytes = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(images, ec)) {
    if (entry.is_regular_file(ec)) bytes += entry.file_size(ec);
  }
  return bytes;
}

Result<JobHandle::Checkpoint> JobHandle::checkpoint(const fs::path& images, AfterDump after) const {
  const JobRecord& record = *record_;
  auto external = prepare_dump(images);
  if (!external) return external.error();
  const fs::path log = images / "dump.log";
  const criu::Leave leave = after == AfterDump::kLeaveRunning   ? criu::Leave::kRunning
                            : after == AfterDump::kLeaveStopped ? criu::Leave::kStopped
                                                                : criu::Leave::kNothing;
  const auto started = std::chrono::steady_clock::now();  // GPU state suspended counts in the pause
  auto suspended = suspend_cuda(record);
  if (!suspended) return suspended.error();
  auto ran = criu::run(criu::dump_args(record.criu, record.job_pid, images, log, leave, *external),
                       record.checkpoint_timeout);
  // The job runs on after a failed dump (CRIU lets go of it) and after kLeaveRunning.
  if (!ran || ran->timed_out || ran->exit_code != 0 || after == AfterDump::kLeaveRunning) (void)resume_cuda(record, {});
  if (!ran) return ran.error();
  if (ran->timed_out) {
    spdlog::error("job checkpoint hung job=\"{}\" timeout_ms={}; CRIU killed", record.job_id,
                  record.checkpoint_timeout.count());
    return Error::of(ErrorCode::kUnavailable, "job", record.job_id,
                     fmt::format("CRIU did not finish the dump within {}ms and was killed; {}",
                                 record.checkpoint_timeout.count(), criu::log_errors(log)));
  }
  if (ran->exit_code != 0) {
    return Error::of(ErrorCode::kFailedPrecondition, "job", record.job_id,
                     "CRIU could not dump it: " + criu::log_errors(log));
  }
  Checkpoint taken;
  taken.pause = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - started);
  taken.bytes = images_bytes(images);
  taken.cuda_processes = *suspended;
  spdlog::info("job checkpointed job=\"{}\" images=\"{}\" bytes={} pause_ms={} after={}", record.job_id,
               images.string(), taken.bytes, taken.pause.count(), static_cast<int>(after));
  return taken;
}

Result<std::unique_ptr<JobHandle::LazyDump>> JobHandle::checkpoint_lazy(const fs::path& images,
                                                                        const std::string& address, int port) const {
  const JobRecord& record = *record_;
  auto external = prepare_dump(images);
  if (!external) return external.error();
  const fs::path log = images / "dump.log";
  const auto started = std::chrono::steady_clock::now();
  auto suspended = suspend_cuda(record);
  if (!suspended) return suspended.error();
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) {
    (void)resume_cuda(record, {});
    return Error::internal("pipe: " + errno_text(errno));
  }
  const HostPort pages{address, port};
  auto pid = criu::spawn(criu::dump_args(record.criu, record.job_pid, images, log, criu::Leave::kStopped, *external, &pages),
                         ready[1]);
  ::close(ready[1]);
  if (!pid) {
    ::close(ready[0]);
    (void)resume_cuda(record, {});
    return pid.error();
  }
  // CRIU writes its status byte once all but the memory is in the images and the page server
  // listens; it closes the pipe unwritten when it fails first.
  pollfd wait_for{ready[0], POLLIN, 0};
  const int polled = ::poll(&wait_for, 1, static_cast<int>(record.checkpoint_timeout.count()));
  char byte = 1;
  const bool is_ready = polled == 1 && ::read(ready[0], &byte, 1) == 1;
  ::close(ready[0]);
  Checkpoint taken;
  taken.pause = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - started);
  taken.cuda_processes = *suspended;
  if (!is_ready) {
    ::kill(*pid, SIGKILL);  // CRIU lets go of the tasks it held: they run on
    ::waitpid(*pid, nullptr, 0);
    (void)resume_cuda(record, {});
    return Error::of(ErrorCode::kFailedPrecondition, "job", record.job_id,
                     (polled == 0 ? fmt::format("CRIU did not write the images within {}ms; ",
                                                record.checkpoint_timeout.count())
                                  : std::string("CRIU could not dump it for post-copy: ")) +
                         criu::log_errors(log));
  }
  taken.bytes = images_bytes(images);
  spdlog::info("job checkpointed for post-copy job=\"{}\" images=\"{}\" bytes={} pause_ms={} pages=\"{}\"",
               record.job_id, images.string(), taken.bytes, taken.pause.count(), format_host_port(pages));
  return std::make_unique<LazyDump>(*pid, record.job_id, log, taken, pages);
}

Status JobHandle::LazyDump::wait_served(milliseconds timeout, const std::function<bool()>& give_up) {
  if (criu_ <= 0) return Error::failed_precondition("job " + job_id_ + ": the post-copy dump was stopped");
  bool gave_up = false;
  criu::RunResult ran = criu::wait(criu_, std::chrono::steady_clock::now(), timeout,
                                   give_up ? std::function<bool()>([&] { return gave_up = give_up(); }) : nullptr);
  criu_ = 0;
  if (gave_up) {
    return Error::of(ErrorCode::kUnavailable, "job", job_id_, "serving its pages was given up before all were pulled");
  }
  if (ran.timed_out) {
    return Error::of(ErrorCode::kUnavailable, "job", job_id_,
                     fmt::format("its pages were not all pulled within {}ms; the page server was stopped", timeout.count()));
  }
  if (ran.exit_code != 0) {
    return Error::of(ErrorCode::kFailedPrecondition, "job", job_id_, "serving its pages failed: " + criu::log_errors(log_));
  }
  return {};
}

void JobHandle::LazyDump::cancel() {
  if (criu_ <= 0) return;
  // CRIU holds the tasks while it serves: killed, it lets go of them and they run on.
  ::kill(criu_, SIGKILL);
  ::waitpid(criu_, nullptr, 0);
  criu_ = 0;
}

Result<int> free_tcp_port(const std::string& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(address.c_str(), "0", &hints, &found); rc != 0 || !found) {
    return Error::invalid_argument("address", address, std::string("cannot be listened on: ") + ::gai_strerror(rc));
  }
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int port = -1;
  if (fd >= 0 && ::bind(fd, found->ai_addr, found->ai_addrlen) == 0) {
    sockaddr_storage bound{};
    socklen_t size = sizeof(bound);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &size) == 0) {
      port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    }
  }
  const int err = errno;
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(found);
  if (port <= 0) return Error::invalid_argument("address", address, "cannot be listened on: " + std::string(std::strerror(err)));
  return port;
}

Status enable_post_copy(const fs::path& sysctl) {
  constexpr int64_t kNeeded = int64_t{4} << 20, kSet = int64_t{8} << 20;
  auto text = cgroups::read_file(sysctl);
  if (!text) return Error::failed_precondition("post-copy: cannot read " + sysctl.string() + ": " + text.error().message);
  auto current = parse_int(trim(*text), sysctl.string());
  if (!current) return current.error();
  if (*current >= kNeeded) return {};
  std::ofstream(sysctl) << kSet;
  auto after = cgroups::read_file(sysctl);
  auto now = after ? parse_int(trim(*after), sysctl.string()) : Result<int64_t>(after.error());
  if (!now || *now < kNeeded) {
    return Error::failed_precondition(fmt::format("post-copy needs {} of at least {} (CRIU's page pipes); it is {} "
                                                  "and could not be raised (run the agent as root)",
                                                  sysctl.string(), kNeeded, *current));
  }
  spdlog::info("post-copy enabled: {} raised from {} to {}", sysctl.string(), *current, *now);
  return {};
}

std::string find_cuda_checkpoint() { return cuda::find_tool(); }

std::string find_criu() {
  for (const char* dir : {"/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/local/bin", "/usr/bin", "/bin"}) {
    const std::string path = std::string(dir) + "/criu";
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

namespace {

// SIGCONT to every task of a stopped job (a stopped tree forks nothing meanwhile).
void continue_tree(const JobRecord& record) {
  const std::vector<pid_t> pids = tree_of(record.job_pid);
  for (pid_t pid : pids) ::kill(pid, SIGCONT);
  spdlog::info("job thawed job=\"{}\" processes={}", record.job_id, pids.size());
}

}  // namespace

Status JobHandle::thaw() const {
  const JobRecord& record = *record_;
  if (record.job_pid <= 0) return Error::failed_precondition("job " + record.job_id + " has no process");
  continue_tree(record);
  // Their CUDA calls block until they are resumed, which needs them running: after SIGCONT.
  return resume_cuda(record, {});
}

bool JobHandle::maps_file_under(const fs::path& dir) const {
  const JobRecord& record = *record_;
  if (record.job_pid <= 0) return false;
  const std::string prefix = dir.lexically_normal().string();
  for (pid_t pid : tree_of(record.job_pid)) {
    auto maps = cgroups::read_file(fmt::format("/proc/{}/maps", pid));
    if (!maps) continue;
    for (auto line : split(*maps, '\n')) {
      const size_t at = line.find(" /");
      if (at == std::string_view::npos) continue;
      const std::string_view path = line.substr(at + 1);
      if (path.substr(0, prefix.size()) == prefix && (path.size() == prefix.size() || path[prefix.size()] == '/')) {
        return true;
      }
    }
  }
  return false;
}

bool JobHandle::frozen() const {
  const JobRecord& record = *record_;
  // Without a PID namespace the job's own first process could have been stopped by the job.
  if (record.job_pid <= 0 || !record.namespaces) return false;
  // Stopped ('T': a dump left it stopped), or still held by a CRIU that outlived the agent which ran
  // it ('t', tracing stop: a post-copy dump serving pages, or one about to leave it stopped).
  auto stat = jobfiles::read_proc_stat(record.job_pid);
  return stat && (stat->state == 'T' || stat->state == 't');
}

Result<int> rewrite_checkpoint_paths(const fs::path& images, const fs::path& from, const fs::path& to) {
  return criu::rewrite_paths(images, from.string(), to.string());
}

Result<JobStatus> JobHandle::stop(milliseconds grace, milliseconds kill_timeout) const {
  const JobRecord& record = *record_;
  JobStatus status = status_of(record);
  if (status.state == JobState::kRunning) {
    (void)send_control(record, fmt::format("signal {}", SIGTERM));
    status = wait(grace);
  }
  if (status.state == JobState::kRunning) {
    spdlog::info("job stop escalates to SIGKILL job=\"{}\"", record.job_id);
    // Through the shim first: it kills the tree (the namespace's init, the process group, the
    // cgroup) and records that the job was stopped.
    if (send_control(record, "kill")) status = wait(kill_timeout);
  }
  if (status.state != JobState::kExited) {
    // The shim is gone or stuck: kill through the cgroup ourselves.
    spdlog::warn("job stop kills without its shim job=\"{}\" state={}", record.job_id, to_string(status.state));
    Status killed = record.cgroup.kill_all(kill_timeout);
    if (record.cgroup.empty() && record.job_pid > 0) {
      // No cgroup: only the pid is left; trust it only while its start time matches.
      const auto stat = jobfiles::read_proc_stat(record.job_pid);
      if (stat && stat->start_time == record.job_start_time) {
        ::kill(record.namespaces ? record.job_pid : -record.job_pid, SIGKILL);
      }
    }
    if (status.state == JobState::kRunning) status = wait(kill_timeout);
    if (!killed) {
      remove_cgroup(record);
      return killed.error();
    }
  }
  remove_cgroup(record);
  if (status.state == JobState::kRunning) {
    return Error::of(
        ErrorCode::kUnavailable, "job", record.job_id,
        fmt::format("still running {}ms after SIGKILL: its shim did not record the end", kill_timeout.count()));
  }
  return status;
}

// ---------------------------------------------------------------------------------------------
// Runtime

struct Runtime::Impl {
  RuntimeOptions options;
  RuntimeCapabilities capabilities;
  cgroups::Layout layout;
};

Runtime::Runtime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Runtime::~Runtime() = default;

const RuntimeCapabilities& Runtime::capabilities() const { return impl_->capabilities; }
const RuntimeOptions& Runtime::options() const { return impl_->options; }

Result<std::unique_ptr<Runtime>> Runtime::create(RuntimeOptions options) {
  if (options.shim_command.empty() || options.shim_command[0].empty() || options.shim_command[0][0] != '/') {
    return Error::invalid_argument("shim_command", options.shim_command.empty() ? "" : options.shim_command[0],
                                   "an absolute path to the shim's executable is required");
  }
  if (::access(options.shim_command[0].c_str(), X_OK) != 0) {
    return Error::invalid_argument("shim_command", options.shim_command[0], "not executable: " + errno_text(errno));
  }
  const fs::path parent(options.cgroup_parent);
  bool parent_ok = !options.cgroup_parent.empty() && parent.is_relative();
  for (const auto& part : parent) {
    const std::string p = part.string();
    if (p.empty() || p[0] == '.' || !std::all_of(p.begin(), p.end(), allowed_name_char)) parent_ok = false;
  }
  if (!parent_ok) {
    return Error::invalid_argument("cgroup_parent", options.cgroup_parent,
                                   "a relative path of names (letters, digits, '.', '_', '-'; no '..')");
  }
  if (options.start_timeout.count() <= 0) {
    return Error::invalid_argument("start_timeout", std::to_string(options.start_timeout.count()), "more than 0ms");
  }

  auto impl = std::make_unique<Impl>();
  RuntimeCapabilities& caps = impl->capabilities;
  if (options.use_cgroups) {
    auto mountinfo = cgroups::read_file(options.mountinfo);
    if (mountinfo) {
      impl->layout = cgroups::detect(cgroups::parse_mountinfo(*mountinfo), options.cgroup_parent);
    } else {
      impl->layout.reason = mountinfo.error().to_string();
    }
  } else {
    impl->layout.reason = "disabled by the runtime's options";
  }
  const cgroups::Layout& layout = impl->layout;
  caps.cgroups = layout.version;
  caps.cpu_limit = layout.cpu;
  caps.memory_limit = layout.memory;
  // v2 decides per job (memory.swap.max exists only with swap support).
  caps.swap_limit = layout.version == CgroupVersion::kV2 ? layout.memory : layout.swap;
  caps.pids_limit = layout.pids;
  caps.tree_kill = layout.version != CgroupVersion::kNone;
  caps.cgroups_reason = layout.reason;
  if (options.use_namespaces) {
    caps.namespaces_reason = probe_namespaces();
    caps.namespaces = caps.namespaces_reason.empty();
  } else {
    caps.namespaces_reason = "disabled by the runtime's options";
  }
  if (!caps.namespaces) {
    caps.job_view_reason = "jobs have no mount namespace of their own";
  } else if (std::error_code ec; !fs::create_directories(kJobViewRoot, ec) && (ec || !fs::is_directory(kJobViewRoot))) {
    caps.job_view_reason = fmt::format("cannot make {}: {}", kJobViewRoot, ec ? ec.message() : "not a directory");
    spdlog::warn("runtime: jobs see their directories at this node's paths reason=\"{}\"", caps.job_view_reason);
  } else {
    caps.job_view = true;
  }
  caps.switch_user = ::geteuid() == 0;
  if (options.criu.empty()) {
    caps.checkpoint_reason = "no CRIU configured";
  } else if (!caps.namespaces) {
    caps.checkpoint_reason = "CRIU dumps a job as its own PID namespace, and namespaces are unavailable";
  } else if (auto checked = criu::check(options.criu, std::chrono::seconds(30)); !checked) {
    caps.checkpoint_reason = checked.error().message;
  } else {
    caps.checkpoint = true;
    caps.checkpoint_other_users = has_capability(kCapSysResource);
    auto tracks = criu::run({options.criu, "check", "--feature", "mem_dirty_track"}, std::chrono::seconds(30));
    caps.dirty_tracking = tracks && !tracks->timed_out && tracks->exit_code == 0;
  }
  if (!caps.checkpoint && !options.criu.empty()) {
    spdlog::warn("runtime: transparent checkpoints unavailable reason=\"{}\"", caps.checkpoint_reason);
  }
  if (!caps.checkpoint) {
    caps.gpu_checkpoint_reason = "no transparent checkpoints on this node (" + caps.checkpoint_reason + ")";
  } else if (options.cuda_checkpoint.empty()) {
    caps.gpu_checkpoint_reason = "no NVIDIA cuda-checkpoint on this node";
  } else if (::access(options.cuda_checkpoint.c_str(), X_OK) != 0) {
    caps.gpu_checkpoint_reason = "cuda-checkpoint " + options.cuda_checkpoint + " cannot be run: " + errno_text(errno);
  } else if (auto usable = cuda::usable(options.cuda_checkpoint, std::chrono::seconds(10)); !usable) {
    caps.gpu_checkpoint_reason = usable.error().message;
  } else {
    caps.gpu_checkpoint = caps.cuda_state = true;
  }
  if (caps.checkpoint && !caps.gpu_checkpoint && options.simulated_gpus) {
    spdlog::info("runtime: jobs holding simulated GPUs are dumped by CRIU alone: no process holds device state "
                 "on them (no cuda-checkpoint: {})",
                 caps.gpu_checkpoint_reason);
    caps.gpu_checkpoint = true;
    caps.gpu_checkpoint_reason.clear();
    options.cuda_checkpoint.clear();
  }

  if (caps.cgroups == CgroupVersion::kNone) {
    spdlog::warn("runtime: cgroups unavailable reason=\"{}\"; jobs run without limits, killed by process group",
                 caps.cgroups_reason);
  } else if (!caps.cgroups_reason.empty()) {
    spdlog::info("runtime: cgroups partial version={} reason=\"{}\"", to_string(caps.cgroups), caps.cgroups_reason);
  }
  if (!caps.namespaces) {
    spdlog::warn("runtime: namespaces unavailable reason=\"{}\"; jobs run in their own session only",
                 caps.namespaces_reason);
  }
  spdlog::info(
      "runtime: ready cgroups={} cpu_limit={} memory_limit={} swap_limit={} pids_limit={} namespaces={} "
      "job_view={} switch_user={} checkpoint={} dirty_tracking={} gpu_checkpoint={}",
      to_string(caps.cgroups), caps.cpu_limit, caps.memory_limit, caps.swap_limit, caps.pids_limit, caps.namespaces,
      caps.job_view, caps.switch_user, caps.checkpoint, caps.dirty_tracking, caps.gpu_checkpoint);
  impl->options = std::move(options);
  return std::unique_ptr<Runtime>(new Runtime(std::move(impl)));
}

Status Runtime::remove_cgroup_parent() {
  std::vector<fs::path> dirs;
  if (impl_->layout.version == CgroupVersion::kV2) dirs.push_back(impl_->layout.v2_parent);
  for (const auto& [controller, dir] : impl_->layout.v1_parents) dirs.push_back(dir);
  for (const auto& dir : dirs) {
    if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) {
      return Error::of(ErrorCode::kFailedPrecondition, "cgroup directory", dir.string(), "rmdir: " + errno_text(errno));
    }
  }
  return {};
}

namespace {

Error start_error(const Json& report, const ProcessSpec& spec, const jobfiles::LaunchSpec& launch) {
  JsonReader reader(report, "shim report");
  const std::string stage = reader.string_or("stage", "");
  const std::string message = reader.string_or("message", "the shim reported a failure");
  if (stage == "exec") return Error::invalid_argument("argv[0]", spec.argv[0], message);
  if (stage == "chdir") return Error::invalid_argument("working_dir", launch.working_dir, message);
  if (stage == "mount_view") {
    std::string views;
    for (const ViewMount& mount : launch.view_mounts) views += (views.empty() ? "" : ",") + mount.view;
    return Error::of(ErrorCode::kUnavailable, "view_mounts", views, message);
  }
  if (stage == "setgroups" || stage == "setgid" || stage == "setuid") {
    return Error::of(ErrorCode::kFailedPrecondition, "run_as", std::to_string(launch.uid), message);
  }
  return Error::of(ErrorCode::kInternal, "job_dir", spec.job_dir.string(), message + " (see shim.log there)");
}

std::string shim_log_tail(const fs::path& dir) {
  auto text = cgroups::read_file(dir / jobfiles::kShimLog);
  if (!text || text->empty()) return "shim.log is empty";
  std::string tail = text->size() > 400 ? text->substr(text->size() - 400) : *text;
  return "shim.log ends: " + std::string(trim(tail));
}

}  // namespace

Result<JobHandle> Runtime::start(const ProcessSpec& spec) {
  if (auto s = validate(spec); !s) return s.error();
  const RuntimeCapabilities& caps = impl_->capabilities;
  auto user = resolve_user(spec.run_as, caps.switch_user);
  if (!user) return user.error();

  std::error_code ec;
  fs::create_directories(spec.job_dir, ec);
  if (ec) return Error::of(ErrorCode::kUnavailable, "job_dir", spec.job_dir.string(), "mkdir: " + ec.message());
  const fs::path dir = fs::canonical(spec.job_dir, ec);
  if (ec) return Error::of(ErrorCode::kUnavailable, "job_dir", spec.job_dir.string(), ec.message());
  for (std::string_view name : {jobfiles::kSpec, jobfiles::kState, jobfiles::kExit, jobfiles::kOutput,
                                jobfiles::kShimLog, jobfiles::kControl}) {
    struct stat st {};
    if (::lstat((dir / name).c_str(), &st) == 0) {
      return Error::of(ErrorCode::kAlreadyExists, "job_dir", dir.string(),
                       fmt::format("holds {} of an earlier run: adopt() it, or start in a fresh directory", name));
    }
  }
  if (user->switch_user) {
    // Sticky and ours: the job's group may create files, but not remove or replace the runtime's.
    if (::chown(dir.c_str(), ::geteuid(), user->gid) != 0 || ::chmod(dir.c_str(), 01770) != 0) {
      return Error::of(ErrorCode::kUnavailable, "job_dir", dir.string(),
                       "cannot hand it to the job's group: " + errno_text(errno));
    }
  }

  jobfiles::LaunchSpec launch;
  launch.job_id = spec.job_id;
  launch.argv = spec.argv;
  launch.env = spec.env;
  launch.working_dir = spec.working_dir.empty() ? dir.string() : spec.working_dir;
  const std::string cgroup_name = spec.cgroup_name.empty() ? cgroup_name_for(spec.job_id) : spec.cgroup_name;
  launch.hostname = spec.hostname.empty() ? default_hostname(cgroup_name) : spec.hostname;
  launch.namespaces = caps.namespaces;
  if (caps.namespaces) launch.shim_command = impl_->options.shim_command;
  if (caps.job_view) {
    for (const ViewMount& mount : spec.view_mounts) {
      fs::create_directories(mount.view, ec);
      if (ec) return Error::of(ErrorCode::kUnavailable, "view_mounts", mount.view, "mkdir: " + ec.message());
      launch.view_mounts.push_back(mount);
    }
  }
  // A page pull started for a restore that then does not happen is stopped with it.
  struct StopUnlessStarted {
    std::shared_ptr<std::atomic<bool>> flag;
    bool started = false;
    ~StopUnlessStarted() {
      if (flag && !started) *flag = true;
    }
  } stop_page_pull;
  if (!spec.restore_from.empty()) {
    if (!caps.checkpoint) {
      return Error::failed_precondition("cannot restore job " + spec.job_id + " from its checkpoint here: " +
                                        caps.checkpoint_reason);
    }
    launch.restore_from = fs::absolute(spec.restore_from).string();
    launch.criu = impl_->options.criu;
    launch.restore_timeout_ms = impl_->options.checkpoint_timeout.count();
    if (!spec.pages_from.empty()) {
      auto from = parse_host_port(spec.pages_from, "pages_from");
      if (!from) return from.error();
      auto daemon = start_lazy_pages(impl_->options.criu, launch.restore_from, *from, spec.job_id, spec.give_up_restore);
      if (!daemon) return daemon.error();
      stop_page_pull.flag = *daemon;
      launch.restore_lazy = true;
    }
  }
  launch.switch_user = user->switch_user;
  launch.uid = user->uid;
  launch.gid = user->gid;
  launch.groups = user->groups;
  if (caps.cgroups != CgroupVersion::kNone) {
    auto cgroup = cgroups::create(impl_->layout, cgroup_name, spec.limits, caps.namespaces ? 1 : 0);
    if (!cgroup) return cgroup.error();
    launch.cgroup = std::move(*cgroup);
  }
  RuntimeCapabilities& applied = launch.isolation;
  applied.cgroups = launch.cgroup.empty() ? CgroupVersion::kNone : launch.cgroup.version;
  applied.cpu_limit = launch.cgroup.cpu_limit;
  applied.memory_limit = launch.cgroup.memory_limit;
  applied.swap_limit = launch.cgroup.swap_limit;
  applied.pids_limit = launch.cgroup.pids_limit;
  applied.tree_kill = !launch.cgroup.empty();
  applied.namespaces = caps.namespaces;
  applied.switch_user = user->switch_user;
  applied.cgroups_reason = caps.cgroups_reason;
  applied.namespaces_reason = caps.namespaces_reason;

  auto fail = [&](Error error) -> Result<JobHandle> {
    if (!launch.cgroup.empty()) {
      (void)launch.cgroup.kill_all(milliseconds(1000));
      (void)launch.cgroup.remove(kRemoveTimeout);
    }
    return error;
  };
  if (auto s = jobfiles::write_atomic(dir, jobfiles::kSpec, jobfiles::encode(launch)); !s) return fail(s.error());

  const int log_fd =
      ::open((dir / jobfiles::kShimLog).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (log_fd < 0) {
    return fail(Error::of(ErrorCode::kUnavailable, "job_dir", dir.string(), "shim.log: " + errno_text(errno)));
  }
  int status_pipe[2];
  if (::pipe2(status_pipe, O_CLOEXEC) != 0) {
    ::close(log_fd);
    return fail(Error::internal("pipe: " + errno_text(errno)));
  }
  // Off the low numbers, so that dup2 onto 3 below always makes a fresh (inheritable) copy.
  const int status_w = ::fcntl(status_pipe[1], F_DUPFD_CLOEXEC, 10);
  ::close(status_pipe[1]);

  std::vector<std::string> args = impl_->options.shim_command;
  args.insert(args.end(),
              {std::string(jobfiles::kJobDirFlag), dir.string(), std::string(jobfiles::kStatusFdFlag), "3"});
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);

  // posix_spawn (vfork-like in glibc) rather than fork: cheap for a big agent, and nothing of
  // ours runs in the child. The shim gets its own session, so it outlives the agent and no
  // terminal's signals reach it.
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, log_fd, STDERR_FILENO);
  posix_spawn_file_actions_adddup2(&actions, status_w, 3);
  posix_spawn_file_actions_addclosefrom_np(&actions, 4);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t shim = 0;
  const int spawn_rc = ::posix_spawn(&shim, argv[0], &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(log_fd);
  ::close(status_w);
  if (spawn_rc == 0) ShimReaper::instance().track(shim);
  ShimReaper::instance().reap();
  if (spawn_rc != 0) {
    ::close(status_pipe[0]);
    return fail(Error::of(ErrorCode::kFailedPrecondition, "shim_command", args[0],
                          "cannot start the shim: " + errno_text(spawn_rc)));
  }

  // The shim's report: one JSON line, once the job's command has been exec'd (or failed to be).
  std::string line;
  const milliseconds start_timeout =
      impl_->options.start_timeout + (spec.restore_from.empty() ? milliseconds(0) : impl_->options.checkpoint_timeout);
  const auto deadline = steady_clock::now() + start_timeout;
  bool timed_out = false;
  bool given_up = false;
  while (line.find('\n') == std::string::npos) {
    const auto left = std::chrono::ceil<milliseconds>(deadline - steady_clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    if (!given_up && spec.give_up_restore && !spec.restore_from.empty() && spec.give_up_restore()) {
      // The shim kills CRIU and reports the start failed.
      spdlog::info("job restore given up job=\"{}\" shim_pid={}", spec.job_id, shim);
      given_up = true;
      ::kill(shim, SIGTERM);
    }
    pollfd pfd{status_pipe[0], POLLIN, 0};
    const long slice = spec.give_up_restore ? std::min<long>(left, kGiveUpCheck.count()) : left;
    const int ready = ::poll(&pfd, 1, static_cast<int>(slice));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    char buffer[1024];
    const ssize_t n = ::read(status_pipe[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    line.append(buffer, static_cast<size_t>(n));
  }
  ::close(status_pipe[0]);
  const Json report = Json::parse(line.substr(0, line.find('\n')), nullptr, /*allow_exceptions=*/false);
  const bool reported = !report.is_discarded() && report.is_object() && report.contains("ok");
  if (!reported) {
    ::kill(shim, SIGKILL);
    int status = 0;
    ::waitpid(shim, &status, 0);
    const std::string why = timed_out ? fmt::format("did not report within {}ms", start_timeout.count())
                                      : "exited without reporting";
    spdlog::error("job start failed job=\"{}\" shim_pid={} error=\"the shim {}\"", spec.job_id, shim, why);
    return fail(Error::of(ErrorCode::kInternal, "job_dir", dir.string(),
                          fmt::format("the shim {}; {}", why, shim_log_tail(dir))));
  }
  const auto ok = report.find("ok");
  if (!ok->is_boolean() || !ok->get<bool>()) {
    // The shim has cleaned up (cgroup, exit.json) and exits: the reaper collects it.
    Error error = given_up ? restore_given_up(spec.job_id) : start_error(report, spec, launch);
    spdlog::warn("job start failed job=\"{}\" error=\"{}\"", spec.job_id, error.to_string());
    return error;
  }

  auto record = std::make_shared<JobRecord>();
  record->job_id = spec.job_id;
  record->job_dir = dir;
  record->isolation = launch.isolation;
  record->cgroup = launch.cgroup;
  record->namespaces = launch.namespaces;
  record->shim_pid = shim;
  if (impl_->capabilities.checkpoint) record->criu = impl_->options.criu;
  if (impl_->capabilities.cuda_state) record->cuda_tool = impl_->options.cuda_checkpoint;
  record->checkpoint_timeout = impl_->options.checkpoint_timeout;
  if (auto stat = jobfiles::read_proc_stat(shim)) record->shim_start_time = stat->start_time;
  if (auto state_text = jobfiles::read_trusted(dir / jobfiles::kState)) {
    if (auto state = jobfiles::decode_state(*state_text)) {
      record->job_pid = state->job_pid;
      record->job_start_time = state->job_start_time;
      record->shim_start_time = state->shim_start_time;
    }
  }
  const auto restore_ms = report.find("restore_ms");  // how long CRIU's restore took, for a restore
  spdlog::info("job started job=\"{}\" dir=\"{}\" shim_pid={} job_pid={} cgroups={} namespaces={} uid={}{}", spec.job_id,
               dir.string(), shim, record->job_pid, to_string(applied.cgroups), applied.namespaces,
               user->switch_user ? user->uid : ::geteuid(),
               restore_ms != report.end() && restore_ms->is_number() ? fmt::format(" restore_ms={}", restore_ms->dump()) : "");
  JobHandle handle(std::move(record));
  if (given_up) {  // restored just before the shim heard it was not wanted: it never runs
    (void)handle.stop(milliseconds(0));
    return restore_given_up(spec.job_id);
  }
  stop_page_pull.started = true;
  // CRIU restores a tree dumped while stopped (kLeaveStopped, not thawed) stopped: a restored job runs.
  if (!spec.restore_from.empty() && handle.frozen()) {
    spdlog::warn("job restored stopped job=\"{}\"; thawing it", spec.job_id);
    continue_tree(*handle.record_);
  }
  if (!spec.restore_from.empty()) {
    // Its CUDA processes come back suspended, as they were dumped: onto this node's GPUs. One that
    // cannot resume would block in its next CUDA call for good, so the restore fails instead.
    if (auto resumed = resume_cuda(*handle.record_, spec.gpu_device_map); !resumed) {
      (void)handle.stop(milliseconds(0));
      return resumed.error();
    }
  }
  return handle;
}

Result<JobHandle> Runtime::adopt(const fs::path& job_dir) {
  std::error_code ec;
  const fs::path dir = fs::canonical(job_dir, ec);
  if (ec) return Error::not_found("job_dir", job_dir.string(), ec.message());
  auto spec_text = jobfiles::read_trusted(dir / jobfiles::kSpec);
  if (!spec_text) {
    if (spec_text.error().code == ErrorCode::kNotFound) {
      return Error::not_found("job_dir", dir.string(), "no spec.json: not a job directory of this runtime");
    }
    return spec_text.error();
  }
  auto launch = jobfiles::decode_spec(*spec_text);
  if (!launch) return launch.error();

  auto record = std::make_shared<JobRecord>();
  record->job_id = launch->job_id;
  record->job_dir = dir;
  record->isolation = launch->isolation;
  record->cgroup = launch->cgroup;
  record->namespaces = launch->namespaces;
  if (impl_->capabilities.checkpoint) record->criu = impl_->options.criu;
  if (impl_->capabilities.cuda_state) record->cuda_tool = impl_->options.cuda_checkpoint;
  record->checkpoint_timeout = impl_->options.checkpoint_timeout;
  auto state_text = jobfiles::read_trusted(dir / jobfiles::kState);
  if (state_text) {
    auto state = jobfiles::decode_state(*state_text);
    if (!state) return state.error();
    record->shim_pid = state->shim_pid;
    record->shim_start_time = state->shim_start_time;
    record->job_pid = state->job_pid;
    record->job_start_time = state->job_start_time;
  } else {
    // Stopped while starting it: the shim may have failed (then exit.json says so) or be unknown.
    record->no_state_reason =
        "no state.json: the agent stopped while the job was starting; " + state_text.error().to_string();
  }
  const JobHandle handle(std::move(record));
  const JobStatus status = handle.status();
  spdlog::info("job adopted job=\"{}\" dir=\"{}\" shim_pid={} state={}", handle.job_id(), dir.string(),
               handle.shim_pid(), to_string(status.state));
  return handle;
}

}  // namespace cnlab::agent
