// src/agent/runtime/runtime.h — the agent's process runtime: the only header other parts include
// from src/agent/runtime.
//
// A job runs under a small supervisor, the shim: a separate, detached process (its own session)
// started from an executable that calls `shim_main`. The shim owns the job's stdout and stderr,
// writes every line into `<job_dir>/output.log`, and writes `<job_dir>/exit.json` (atomically)
// when the job ends. The agent keeps no pipe to the job, so a job survives an agent restart: a
// new agent calls `Runtime::adopt(job_dir)` and carries on, reading output from the cursor it
// persisted.
//
// Files in a job directory (all written by the runtime or the shim, mode 0600):
//   spec.json   what to run, as resolved by start() (written before the shim starts)
//   state.json  the shim's pid and start time, the job's pid (written once the job runs)
//   exit.json   how the job ended (written last, via rename; its presence means "finished")
//   output.log  the job's output, one record a line (format below)
//   shim.log    the shim's own diagnostics
//   control     a FIFO the shim reads: how signal() and stop() reach it without pid races
//
// output.log format, one record per line:   <S> <time> <text>\n
//   S     'O' stdout, 'E' stderr. Lowercase ('o', 'e') marks a record that holds only part of a
//         line: the line went on past 64 KiB, or it waited more than a second for its newline
//         (a progress bar); the rest follows in later records of the same stream, the last one
//         uppercase. A last line without a newline is written when the stream ends, uppercase.
//   time  when the shim read the line: UTC with milliseconds, 24 bytes, 2026-12-01T03:26:01.123Z
//   text  the line's bytes without its newline. Bytes that are not valid UTF-8 are replaced by
//         U+FFFD each, so the file is always valid UTF-8 and '\n' only ever ends a record; every
//         other byte (NUL, '\r', escape sequences) passes through unchanged.
// Lines of the two streams are ordered as the shim read them: within a stream exactly, across
// the streams only as well as two pipes allow (as with any runtime that keeps them apart).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include <utility>

#include "common/result.h"
#include "common/strings.h"

namespace cnlab::agent {

// ---------------------------------------------------------------------------------------------
// What a job asks for.

// 0 means "no limit".
struct ResourceLimits {
  int64_t cpu_milli = 0;     // 1000 = one CPU's worth of time per period (CFS quota)
  int64_t memory_bytes = 0;  // RAM; swap is kept off for the job where the kernel allows
  int64_t pids = 0;          // tasks (processes and threads) of the job itself; the runtime's
                             // init inside the job's PID namespace is not counted against it
};

// Who the job runs as. Empty: as the agent's own user (`cnlab dev`). Otherwise the job's process
// calls setgroups, setgid and setuid before exec; this needs the agent to run as root.
struct RunAs {
  std::string user;             // a user name, resolved with getpwnam_r; or
  std::optional<uint32_t> uid;  // a numeric uid (its passwd entry, if any, gives the groups)
  std::optional<uint32_t> gid;  // the primary group; default: the user's from passwd
  bool empty() const { return user.empty() && !uid && !gid; }
};

// Where a job that has namespaces sees its directories: the same path on every node, whatever the
// node's data directory, so that what the job keeps of them (its environment, its working
// directory, Python's sys.path) still holds after it is restored on a node that keeps its files
// elsewhere. The runtime creates the mount points on the host; each job binds over them in its
// own mount namespace, so jobs and agents sharing a machine do not see each other's.
inline constexpr std::string_view kJobViewRoot = "/run/cnlab/job";

// A node directory bound into the job's mount namespace at `view` (absolute, under kJobViewRoot).
struct ViewMount {
  std::filesystem::path source;  // absolute, an existing directory of this node
  std::string view;
};

struct ProcessSpec {
  std::string job_id;             // for logs; the cgroup name and hostname derive from it
  std::vector<std::string> argv;  // argv[0] without '/' is looked up in PATH of `env`
                                  // (or /usr/local/bin:/usr/bin:/bin when env has none)
  std::vector<std::string> env;   // "KEY=VALUE": exactly the job's environment, nothing inherited
  std::string working_dir;        // absolute; empty: the job directory
  // Applied only where the runtime can (capabilities().job_view): the caller then gives the job
  // the view paths (its environment, working_dir), and elsewhere the node's own. A restore binds each view mount of the
  // dump from the `source` of the same view here; mounts of other paths from this machine's same
  // path.
  std::vector<ViewMount> view_mounts;
  ResourceLimits limits;
  // Absolute; created if missing; must hold none of the runtime's files from an earlier run. When
  // the job runs as another user, the directory becomes <agent uid>:<job's group> with mode 01770:
  // the job can create files in it, and the sticky bit keeps it from removing or replacing the
  // runtime's files (which it also cannot read: they are 0600). Its parents must be searchable by
  // the job's user.
  std::filesystem::path job_dir;
  std::string cgroup_name;        // empty: cgroup_name_for(job_id)
  // A directory JobHandle::checkpoint wrote (its paths already where this node keeps the job's
  // files: rewrite_checkpoint_paths): the job is restored from it, exactly where it was, instead
  // of started from argv. Needs capabilities().checkpoint.
  std::filesystem::path restore_from;
  // "host:port": restore_from holds a post-copy dump's images (JobHandle::checkpoint_lazy), whose
  // memory is pulled from that page server while the job already runs here (`criu lazy-pages`).
  // Where the pull fails (the source gone mid-way), the job faults on the pages it lacks and dies;
  // why is written to restore_from/kPagesNotPulledFile.
  std::string pages_from;
  // Old GPU UUID -> new, for a restore whose CUDA processes were dumped on other GPUs (of the same
  // model): cuda-checkpoint's --device-map. Empty: the same GPUs.
  std::vector<std::pair<std::string, std::string>> gpu_device_map;
  std::string hostname;           // the job's hostname in its UTS namespace; empty: cgroup name
  RunAs run_as;
  // Asked every ~100 ms while a restore is under way (the page pull starting, CRIU restoring):
  // true gives it up (CRIU killed, nothing of the job left) and start() fails saying so. A
  // migration's target uses it once the server no longer waits for the move.
  std::function<bool()> give_up_restore;
};

// A cgroup (and hostname) safe name for a job id: letters, digits, '.', '_' and '-' kept, anything
// else replaced by '_', at most 64 characters; when anything was replaced or cut, a hash of the
// whole id is appended so that two ids never share a name.
std::string cgroup_name_for(std::string_view job_id);

// ---------------------------------------------------------------------------------------------
// What the machine allows, and what a job got.

enum class CgroupVersion { kNone, kV1, kV2 };
std::string_view to_string(CgroupVersion version);

// For the runtime: what this machine allows. For a job (JobHandle::isolation): what was applied.
struct RuntimeCapabilities {
  CgroupVersion cgroups = CgroupVersion::kNone;
  bool cpu_limit = false;
  bool memory_limit = false;
  bool swap_limit = false;  // swap kept off (memory.memsw / memory.swap.max)
  bool pids_limit = false;
  bool tree_kill = false;         // stop() kills the whole tree through the cgroup
  bool namespaces = false;        // own PID, mount (fresh /proc), IPC and UTS namespaces
  // ProcessSpec::view_mounts are applied: namespaces, and kJobViewRoot could be made on the host.
  bool job_view = false;
  bool switch_user = false;       // RunAs can be honoured (the agent is root)
  std::string cgroups_reason;     // why cgroups are off or partial; empty when all is well
  std::string namespaces_reason;  // why namespaces are off; empty when they work
  std::string job_view_reason;    // why jobs see their node's own paths; empty when they get the view
  // Transparent checkpoints (CRIU): a running job's whole tree dumped and restored, here or on
  // another node. Needs namespaces, root and a CRIU whose `criu check` passes.
  bool checkpoint = false;
  std::string checkpoint_reason;  // why not; empty when they work
  // CRIU reads the resource limits of every task it dumps; for a task of another user that takes
  // CAP_SYS_RESOURCE, which some machines' root lacks (this build VM's). Without it, jobs run as
  // another user (RunAs) are not checkpointed transparently.
  bool checkpoint_other_users = false;
  // Whether the kernel tracks dirty memory (soft-dirty bits; `criu check --feature
  // mem_dirty_track`), which pre-copy rounds need. Detected, never assumed; CNLab's migrations do
  // not take pre-copy rounds yet (post-copy keeps the pause short without them).
  bool dirty_tracking = false;
  // GPU state in transparent checkpoints: NVIDIA's cuda-checkpoint (RuntimeOptions::cuda_checkpoint)
  // moves each CUDA process's device memory and contexts into its host memory before the dump and
  // back onto a GPU after a restore or a thaw. Without it a job holding GPUs is not dumped.
  bool gpu_checkpoint = false;
  std::string gpu_checkpoint_reason;  // why not; empty when GPU state is checkpointed
  // Whether that goes through cuda-checkpoint. With gpu_checkpoint and not this, the GPUs are
  // simulated (RuntimeOptions::simulated_gpus): dumps hold no device state, and a dump that does
  // (cuda_processes) cannot be resumed here.
  bool cuda_state = false;
};

// ---------------------------------------------------------------------------------------------
// How a job is doing.

enum class JobState {
  kRunning,
  kExited,  // exit.json is written; the output file is complete
  kLost,    // the shim is gone and left no exit.json (killed with SIGKILL, machine trouble);
            // stop() still kills what is left in the job's cgroup
};
std::string_view to_string(JobState state);

struct JobStatus {
  JobState state = JobState::kRunning;
  std::optional<int> exit_code;  // the command exited with this code
  std::optional<int> signal;     // the command was killed by this signal
  bool oom_killed = false;       // killed by SIGKILL while its cgroup counted an OOM kill
  int64_t oom_kills = 0;         // OOM kills in the job's cgroup over its life
  bool stopped = false;          // the runtime killed it (stop() after its grace)
  std::string error;             // why it never ran (exec failed, ...) or why it is lost
  std::optional<std::chrono::system_clock::time_point> finished_at;
};

class Runtime;
struct JobRecord;

// A running (or finished) job. Cheap to copy; dropping every copy leaves the job running.
// Thread-safe: all members are const and read the job directory or /proc.
class JobHandle {
 public:
  const std::string& job_id() const;
  const std::filesystem::path& job_dir() const;
  std::filesystem::path output_path() const;
  // What isolation was applied to this job (cgroup version, limits, namespaces).
  const RuntimeCapabilities& isolation() const;
  pid_t shim_pid() const;

  // Reads exit.json and checks the shim is still the process it was. Never blocks.
  JobStatus status() const;
  // Returns as soon as the job is no longer running, or after `timeout` with state kRunning.
  JobStatus wait(std::chrono::milliseconds timeout) const;

  // Sends `sig` to the job's command (through the init of its PID namespace, which forwards it;
  // without namespaces, straight to the command). Failed precondition once the job has ended.
  Status signal(int sig) const;
  // SIGUSR1, the checkpoint signal: a job that handles it saves its state. Sent to the job's
  // outermost processes that have a handler for it (a wrapper shell's program, not its workers);
  // never to one without (the default action would end it). Failed precondition where no process
  // handles it, or the job has ended.
  Status send_checkpoint_signal() const;
  // The memory a dump of the job would copy now: its processes' anonymous and shared memory
  // resident in RAM (RssAnon + RssShmem of each process of its tree; shared pages count once per
  // process that maps them). Failed precondition once the job has ended.
  Result<int64_t> memory_bytes() const;

  // Dumps the job's whole process tree (its PID namespace: memory, threads, signals, open files
  // and their offsets, pipes, its mount, IPC and UTS namespaces) into `images` (created; must not
  // exist) with CRIU, to be restored from there (ProcessSpec::restore_from). Afterwards the job
  //   kStop:         has ended (its status: killed by SIGKILL);
  //   kLeaveRunning: carries on;
  //   kLeaveStopped: stays frozen (every task stopped) until thaw() or stop(): a migration's
  //                  source keeps it so until the target runs it, and files are copied meanwhile.
  // What the job had written to its stdout and stderr but the shim had not yet read stays with this
  // shim: CRIU saves a pipe's data only through a read end, and the tree holds only the write ends
  // of its output pipes, so a restored copy does not print it again.
  // With capabilities().gpu_checkpoint, the tree's CUDA processes are suspended first (their GPU
  // state into host memory, where CRIU dumps it): kLeaveRunning resumes them after the dump,
  // kLeaveStopped leaves them suspended until thaw(); a restore resumes them. A CUDA process that
  // cannot be suspended fails the checkpoint (the job running on).
  // `pause` is how long the dump froze the job. Fails (the job running on, also after a CRIU that
  // hung was killed) on a runtime without capabilities().checkpoint, a job without a PID namespace
  // or not running, or a tree CRIU cannot dump (its log's errors in the message).
  enum class AfterDump { kStop, kLeaveRunning, kLeaveStopped };
  struct Checkpoint {
    std::chrono::milliseconds pause{0};
    uint64_t bytes = 0;  // the images' size
    int cuda_processes = 0;  // processes whose GPU state cuda-checkpoint suspended into the images
  };
  Result<Checkpoint> checkpoint(const std::filesystem::path& images, AfterDump after) const;

  // A post-copy dump under way (checkpoint_lazy): CRIU has written everything but the job's memory
  // into the images and serves that memory from its page server until a restore elsewhere
  // (ProcessSpec::pages_from) has pulled every page. CRIU holds the job stopped while it serves
  // and leaves it stopped once every page is served (as kLeaveStopped: stop() ends it); cancelled
  // before that, CRIU lets go of it and it runs on here.
  class LazyDump {
   public:
    LazyDump(pid_t criu, std::string job_id, std::filesystem::path log, Checkpoint taken, HostPort page_server)
        : criu_(criu), job_id_(std::move(job_id)), log_(std::move(log)), taken_(taken),
          page_server_(std::move(page_server)) {}
    ~LazyDump() { cancel(); }
    LazyDump(const LazyDump&) = delete;
    LazyDump& operator=(const LazyDump&) = delete;

    // The freeze until the images (all but the memory) were written, and their size.
    const Checkpoint& taken() const { return taken_; }
    // Where CRIU serves the memory (ProcessSpec::pages_from, formatted).
    const HostPort& page_server() const { return page_server_; }
    // Waits up to `timeout` for CRIU to have served every page: ok once it did; an error (CRIU's
    // log) when it failed or was still serving (it is then stopped), or when `give_up` (asked
    // every few milliseconds) said to stop serving.
    Status wait_served(std::chrono::milliseconds timeout, const std::function<bool()>& give_up = {});
    // Stops serving (a restore still pulling pages then fails); the job runs on here.
    void cancel();

   private:
    pid_t criu_;
    std::string job_id_;
    std::filesystem::path log_;
    Checkpoint taken_;
    HostPort page_server_;
  };
  // Like checkpoint(images, kLeaveStopped), post-copy: returns once the images but the memory are
  // written (within the checkpoint timeout), CRIU's page server listening at `pages` for the rest.
  // Needs fs.pipe-max-size of at least 4 MiB (Runtime::enable_post_copy).
  Result<std::unique_ptr<LazyDump>> checkpoint_lazy(const std::filesystem::path& images, const std::string& address,
                                                    int port) const;
  // Continues every task of a job left stopped by checkpoint(kLeaveStopped), and resumes its
  // suspended CUDA processes.
  Status thaw() const;
  // Whether a process of the job maps a file at or below `dir` (a library's shared region, say).
  bool maps_file_under(const std::filesystem::path& dir) const;
  // Whether the job is stopped as checkpoint(kLeaveStopped) leaves it (the init of its PID
  // namespace, which nothing else stops, is): after an agent that died before thawing it.
  bool frozen() const;

 private:
  // What checkpoint() and checkpoint_lazy() check and write first: the images directory (new,
  // 0700), and beside it the job's pipes and its external mounts, which it returns.
  Result<std::vector<std::string>> prepare_dump(const std::filesystem::path& images) const;

 public:

  // SIGTERM to the command, up to `grace` for it to end, then SIGKILL to the job's whole tree
  // through the shim (the namespace's init, the process group, the cgroup) and up to
  // `kill_timeout` for the shim to record the end. If the shim is gone or does not answer, kills
  // through the cgroup itself (cgroup.kill on v2; freeze, SIGKILL, thaw on v1) and waits up to
  // `kill_timeout` more. Removes the job's cgroup. Returns the final status (kExited, or kLost
  // for a job whose shim had died); an error when the job could not be made to go away in time.
  // Blocks at most grace + 2 * kill_timeout (plus a second to remove the cgroup).
  Result<JobStatus> stop(std::chrono::milliseconds grace,
                         std::chrono::milliseconds kill_timeout = std::chrono::seconds(5)) const;

 private:
  friend class Runtime;
  explicit JobHandle(std::shared_ptr<const JobRecord> record);
  std::shared_ptr<const JobRecord> record_;
};

// ---------------------------------------------------------------------------------------------
// The runtime.

struct RuntimeOptions {
  // The command that runs the shim: an executable calling shim_main with the arguments the
  // runtime appends (`--job-dir DIR --status-fd 3`). For the agent: {"<cnlab>", "agent-shim"}.
  std::vector<std::string> shim_command;
  bool use_cgroups = true;     // false: run as if the machine had no cgroups
  bool use_namespaces = true;  // false: run as if the machine refused namespaces
  // Where job cgroups go, relative to each hierarchy's root (v2: the unified mount; v1: each of
  // the memory, cpu, pids and freezer mounts): <root>/<cgroup_parent>/<job's cgroup name>.
  std::string cgroup_parent = "cnlab";
  std::filesystem::path mountinfo = "/proc/self/mountinfo";  // where to find the cgroup mounts
  std::chrono::milliseconds start_timeout{10000};            // for the shim to start the job
  // The CRIU binary for transparent checkpoints (absolute); empty: none. Detected with
  // `criu check` at create(); capabilities().checkpoint says whether it works.
  std::string criu;
  std::chrono::milliseconds checkpoint_timeout{120000};  // a dump's or a restore's longest run
  // NVIDIA's cuda-checkpoint (absolute; cuda::find_tool finds it); empty: none, and jobs holding
  // GPUs get no transparent checkpoints. capabilities().gpu_checkpoint says whether it is used.
  std::string cuda_checkpoint;
  // The node's GPUs are simulated (no driver behind them): no process can hold device state on
  // them, so where no cuda-checkpoint is usable CRIU alone checkpoints a job holding them.
  bool simulated_gpus = false;
};

// Where this machine's cuda-checkpoint is (/usr/local/bin, /usr/bin, ...); empty when none is.
std::string find_cuda_checkpoint();

// A TCP port free on `address` now (the kernel's choice), for a post-copy dump's page server.
Result<int> free_tcp_port(const std::string& address);

// In a post-copy restore's images directory: `criu lazy-pages`' log, and why the job's memory did
// not all arrive (CRIU's errors; only then).
inline constexpr const char* kLazyPagesLog = "lazy-pages.log";
inline constexpr const char* kPagesNotPulledFile = "lazy-pages.failed";

// Post-copy (JobHandle::checkpoint_lazy, ProcessSpec::pages_from) needs fs.pipe-max-size of at
// least 4 MiB: raises it to 8 MiB where it is lower (root); an error says why it cannot.
Status enable_post_copy(const std::filesystem::path& sysctl = "/proc/sys/fs/pipe-max-size");

// Where this machine's `criu` is: /usr/local/sbin, /usr/sbin, /sbin, /usr/local/bin, /usr/bin, /bin
// (install-criu.sh puts it in the first); empty when none is there.
std::string find_criu();

// Rewrites the paths of a checkpoint's images that lie below `from` (the job's directory on the
// node that dumped it) to lie below `to` (where this node keeps it), for a restore here. The
// number of paths rewritten.
Result<int> rewrite_checkpoint_paths(const std::filesystem::path& images, const std::filesystem::path& from,
                                     const std::filesystem::path& to);

// Thread-safe after create().
class Runtime {
 public:
  // Detects what the machine allows (cgroup v2, else v1; namespaces; switching user) and logs
  // once what is not available and why. Fails only for bad options.
  static Result<std::unique_ptr<Runtime>> create(RuntimeOptions options);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const RuntimeCapabilities& capabilities() const;
  const RuntimeOptions& options() const;

  // Creates the job's cgroup, writes spec.json, starts the shim and returns once the job's
  // command has been exec'd (or failed to be: an error naming argv[0], working_dir, run_as, ...).
  // Blocks at most options().start_timeout.
  Result<JobHandle> start(const ProcessSpec& spec);

  // Re-attaches to a job started by an earlier runtime (an agent before its restart). Works for
  // running, finished and lost jobs alike: status() tells which.
  Result<JobHandle> adopt(const std::filesystem::path& job_dir);

  // Removes the (empty) cgroup_parent directories this runtime created; for tests and
  // uninstalls. Fails while any job cgroup remains below them.
  Status remove_cgroup_parent();

 private:
  struct Impl;
  explicit Runtime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// ---------------------------------------------------------------------------------------------
// Reading a job's output.

enum class OutputStream { kStdout, kStderr };
std::string_view to_string(OutputStream stream);  // "stdout", "stderr"

// Where a reader stands: after record number `seq` (records count from 1), which ends at byte
// `offset`. {0, 0} is the beginning. Persist it to resume after a restart.
struct OutputCursor {
  uint64_t seq = 0;
  uint64_t offset = 0;
  friend bool operator==(const OutputCursor&, const OutputCursor&) = default;
};

struct OutputLine {
  uint64_t seq = 0;
  OutputStream stream = OutputStream::kStdout;
  bool partial = false;  // the line continues in the next record of this stream
  std::chrono::system_clock::time_point time;
  std::string text;
  OutputCursor cursor;  // the position just after this record
};

// Reads an output file from a cursor. Only complete records (ending in '\n') are returned, so a
// record the shim is still writing is returned once it is whole. Not thread-safe; movable.
class OutputReader {
 public:
  // Fails when the file cannot be opened, or `from` is not at a record boundary within it.
  static Result<OutputReader> open(const std::filesystem::path& path, OutputCursor from = {});
  OutputReader(OutputReader&& other) noexcept;
  OutputReader& operator=(OutputReader&& other) noexcept;
  ~OutputReader();

  // Up to `max_lines` complete records after the cursor, advancing it; empty when there are none
  // yet. Never blocks. Records that do not parse are skipped (they still take a seq number, so
  // numbering agrees between readers) and counted in malformed().
  Result<std::vector<OutputLine>> read(size_t max_lines = 4096);
  // Blocks until the file has grown past what was read, or `timeout` passes. Uses inotify, or
  // polls every 10 ms where inotify is unavailable. True when there is something new to read.
  bool wait(std::chrono::milliseconds timeout);

  OutputCursor cursor() const { return cursor_; }
  uint64_t malformed() const { return malformed_; }

 private:
  OutputReader(int fd, int inotify_fd, OutputCursor from);
  void close_fds();

  int fd_ = -1;
  int inotify_fd_ = -1;
  OutputCursor cursor_;
  uint64_t read_offset_ = 0;  // file offset of the end of buffer_
  std::string buffer_;        // bytes from cursor_.offset (less pos_) to read_offset_
  size_t pos_ = 0;
  uint64_t malformed_ = 0;
};

// ---------------------------------------------------------------------------------------------
// The shim's entry point. argv[0] is ignored; the runtime passes `--job-dir DIR --status-fd N`.
// `cnlab agent-shim ...` calls it as shim_main(argc - 1, argv + 1). Returns the process's exit
// code. The shim runs single-threaded and must be the process's only work (it forks).
int shim_main(int argc, char** argv);

}  // namespace cnlab::agent
