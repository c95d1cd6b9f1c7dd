// A Job: what a user asked to run (spec) and what became of it (status). Its JSON form is the API's.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json_reader.h"
#include "common/time.h"
#include "model/object_meta.h"
#include "model/slice_request.h"
#include "model/workspace.h"

namespace cnlab::model {

// New values go at the end: code elsewhere may rely on the order of the existing ones.
enum class JobPhase : uint8_t {
  kPending,    // admitted, waiting for the scheduler
  kRunning,    // started by its node's agent; holds its placement
  kSucceeded,  // exited 0
  kFailed,     // exited non-zero, was killed, or its node was lost
  kCancelled,  // cancelled by a user or an admin
  kScheduled,  // bound to a node (placement set), not yet started by its agent. The scheduler
               // library sees only Pending and Running: the server presents Scheduled jobs to it
               // as Running, since they hold their placement.
};
std::string_view to_string(JobPhase phase);
// The phase named `name` ("Scheduled"), exactly as to_string writes it.
std::optional<JobPhase> parse_job_phase(std::string_view name);
// Succeeded, Failed or Cancelled: the job will not run again.
bool is_terminal(JobPhase phase);

// What happened to a job, in the order it happened (JobStatus::events).
enum class JobEventType : uint8_t {
  kQueued,
  kScheduled,
  kStarted,
  kPreempted,
  kCheckpointed,
  kResumed,
  kFinished,
  kCancelled,
  kFailed,
  kMemoryBurst,     // the node's agent changed the job's VRAM limit (a burst granted or taken back)
  kMoveRequested,   // the node's agent asked for the job to be moved off a GPU short of memory
  kIdleReclaimed,   // the server stopped the job: its GPU slice was idle longer than its class allows
  kMigrationRequested,
  kMigrated,         // running on its new node, restored from the source's dump; the reason says the pause
  kMigrationFailed,  // the target could not take it: it carries on on the source
  kCheckpointFailed,  // a checkpoint asked for was not taken (the reason says why); the job runs on
  kNotMovedForDrain,  // its node drains, and the drain does not move it (the reason: for now, or never)
  kReleased,          // the nodes it was pre-empted off have stopped it (the reason: with which checkpoint)
};
std::string_view to_string(JobEventType type);  // "Queued", "Scheduled", ...
std::optional<JobEventType> parse_job_event_type(std::string_view name);

// JSON: {"type": "Scheduled", "time": "2026-11-30T10:01:00Z", "reason": "placed on gpu-12"};
// "reason" is omitted when empty.
struct JobEvent {
  JobEventType type = JobEventType::kQueued;
  Time time{};
  std::string reason;

  bool operator==(const JobEvent&) const = default;
};
Json to_json(const JobEvent& event);

// One GPU (or MIG instance of it) a job holds on a node.
struct GpuBinding {
  int index = 0;       // the GPU's index on the node
  int blocks = 0;      // 1% blocks held; 100 for a whole GPU, the instance's for a MIG request
  int64_t vram_mib = 0;
  int mig_start = -1;  // the MIG instance (by its first memory slot) the blocks sit in; -1 for none

  bool operator==(const GpuBinding&) const = default;
};

struct NodeBinding {
  std::string node;
  std::vector<GpuBinding> gpus;

  bool operator==(const NodeBinding&) const = default;
};

// The archive of files a job runs in (see Workspace): JSON {"digest": "sha256:...", "size_bytes": 123}.
struct WorkspaceRef {
  std::string digest;      // "sha256:" + 64 lowercase hex digits
  int64_t size_bytes = 0;  // >= 0

  bool operator==(const WorkspaceRef&) const = default;
};

// An application checkpoint a job's agent uploaded (PUT /v1/jobs/{id}/checkpoint): a workspace
// archive of its CNLAB_CHECKPOINT_DIR, stored by digest. JSON {"digest": "sha256:...",
// "size_bytes": 123, "taken_at": "2026-11-30T10:01:00Z", "kind": "process", "gpu_state": true,
// "gpus": "real"}; gpu_state is omitted when false and gpus when empty.
struct CheckpointRef {
  std::string digest;      // "sha256:" + 64 lowercase hex digits, of the archive
  int64_t size_bytes = 0;  // of the archive, >= 0
  Time taken_at{};         // when the agent took it (the job's stop)
  // "files": what the job saved in CNLAB_CHECKPOINT_DIR. "process": the agent's transparent
  // checkpoint (CRIU images of the whole process tree and its directories), set only by the
  // agent that took it, so that no job can pass files of its own off as process images.
  std::string kind = "files";
  // A process checkpoint of a job holding GPUs: whether its processes were dumped with their GPU
  // state suspended by NVIDIA's cuda-checkpoint (only a node whose agent has it resumes them), and
  // which GPUs they held, "real" or "simulated" (neither kind resumes on the other). Unset else.
  bool gpu_state = false;
  std::string gpus;

  bool operator==(const CheckpointRef&) const = default;
};
Json to_json(const CheckpointRef& checkpoint);

// The checkpoints the server keeps per job: the latest and the ones before it.
inline constexpr size_t kKeptCheckpointsPerJob = 3;

// Limits the decoder enforces on what a job runs.
inline constexpr size_t kMaxCommandArgs = 1024;
inline constexpr size_t kMaxCommandArgBytes = 4096;
inline constexpr size_t kMaxEnvEntries = 512;
inline constexpr size_t kMaxEnvValueBytes = 32 * 1024;
inline constexpr size_t kMaxWorkingDirBytes = 4096;
inline constexpr int64_t kMaxMemoryUsedMib = int64_t{1} << 30;  // 1 PiB: any host's memory, as reported

// The job's name is metadata.name.
struct JobSpec {
  std::string project;
  std::string user;  // the submitter; the server fills it from the caller's token ("" in a request)
  std::string priority_class = "dev";
  SliceRequest gpu;
  int64_t cpu_milli = 0;   // host CPU, thousandths of a core
  int64_t memory_mib = 0;  // host memory
  std::optional<Time> deadline;                 // wanted completion time
  std::optional<Duration> estimated_duration;   // how long it runs once started
  bool checkpointable = false;                  // can be stopped and resumed from its latest checkpoint
  std::optional<Duration> min_runtime;          // protection from pre-emption; the class's when absent
  // What to run: argv, at most kMaxCommandArgs elements of at most kMaxCommandArgBytes bytes, no
  // NUL. May be empty here; the server's admission requires a command.
  std::vector<std::string> command;
  // Extra environment: names [A-Za-z_][A-Za-z0-9_]*, values of at most kMaxEnvValueBytes bytes
  // without NUL, at most kMaxEnvEntries entries.
  std::map<std::string, std::string> env;
  // Where the command starts, relative to the workspace root ("" = the root): never absolute,
  // no ".." component, no NUL.
  std::string working_dir;
  std::optional<WorkspaceRef> workspace;  // the files to run in; none = an empty directory

  bool operator==(const JobSpec&) const = default;
};

// A live migration under way (POST /v1/jobs/{id}/migrate). The source agent freezes the job,
// dumps it, streams the dump straight to the target agent and reports it handed over; the server
// then binds the job to the target (from = the source); the target restores it and reports
// Running, which ends the migration. A target that fails, or does not report in time, gives the
// job back to the source, which thaws it.
struct Migration {
  std::string to;  // the node asked for; empty: any other node with room
  Time requested_at{};
  std::string from;               // set once the source has handed its dump over
  std::optional<Time> frozen_at;  // when the source froze it: the pause starts here
  int64_t frozen_at_ms = 0;       // the same, in milliseconds since the epoch (for the pause)
  // Post-copy: "host:port" of the source's page gate, which the target pulls the job's memory
  // from over mutual TLS (the dump holds all but the memory). Empty: stop-and-copy.
  std::string pages_from = "";
  // The digest of the dump the source streamed straight to the target's peer endpoint (set with
  // `from`): the target restores only a dump it received from `from` with this digest.
  std::string dump_digest = "";
  // The latest word that the move is still under way (`progress`): from the source while it
  // dumps and sends, then from the target while it restores. The server's --migration-timeout
  // counts from here: a job of many GiB takes longer than the timeout and still moves; a node that
  // falls silent is given up.
  std::optional<Time> progress_at = std::nullopt;
  std::string progress = "";
  // A job holding GPUs: those it takes on `to` (chosen when the move is decided, held there
  // meanwhile), and those it held on the source, which a move given up after the hand-over binds
  // it to again.
  std::vector<GpuBinding> gpus = {};
  std::vector<GpuBinding> from_gpus = {};
  bool operator==(const Migration&) const = default;
};

inline constexpr size_t kMaxReleaseClause = 2048;  // one entry of PendingRelease::released

// A checkpointable job pre-empted while it ran, whose nodes are still taking its checkpoint and
// stopping it. It starts again only once each of them has released it (POST
// /v1/jobs/{id}/release, after its checkpoint was stored or could not be), is lost, or has not
// released it within the server's --release-timeout of `since`: so it never runs in two places at
// once, and it resumes from the checkpoint taken as it stopped rather than an older one.
// JSON {"nodes": ["gpu-1"], "since": "2026-11-30T10:01:00Z", "released": ["node gpu-2 stopped it
// and stored its checkpoint"]}.
struct PendingRelease {
  std::vector<std::string> nodes;  // not empty: those still stopping it
  Time since{};
  // How each node of a gang that has already released it did so, in order; the Released event
  // says all of them once the last one has. Omitted from JSON when empty.
  std::vector<std::string> released;

  bool operator==(const PendingRelease&) const = default;
};

struct JobStatus {
  JobPhase phase = JobPhase::kPending;
  Time submitted_at{};
  std::optional<Time> started_at;
  std::optional<Time> last_checkpoint_at;
  // When its processes last used the GPU (launches or copies), as its node's agent reported; the
  // server reclaims slices idle past their class's limit. Absent: not since it started.
  std::optional<Time> gpu_active_at;
  // The host memory its processes held (what a dump of them copies), as its node's agent last
  // measured it; 0 before any report. A move of the job is priced by, and needs room on its
  // target for, the larger of this and spec.memory_mib (memory_to_move_mib).
  int64_t memory_used_mib = 0;
  std::vector<NodeBinding> placement;  // the node/GPU bindings; set while Scheduled or Running
  // The members of a multi-node (gang) placement whose agents reported Succeeded, in report order.
  // The job ends Succeeded when every node of the placement is here; cleared with the placement.
  std::vector<std::string> succeeded_nodes;
  std::string message;
  std::optional<Time> finished_at;  // when it reached a terminal phase
  std::optional<int> exit_code;     // 0..255, when the process exited
  std::optional<int> signal;        // 1..127, when the process was killed by a signal
  std::vector<JobEvent> events;     // oldest first
  std::string waiting_reason;       // why the scheduler left it waiting, as of its latest cycle
  bool cancel_requested = false;    // a cancel is on its way to the agent
  int attempts = 0;                 // how many times it was started (pre-emption restarts it)
  // The nodes of its latest started attempt (the placement when it was reported Running), kept
  // after the placement is cleared: the nodes that may upload its checkpoint.
  std::vector<std::string> attempt_nodes;
  // The latest uploaded checkpoint, handed back to the job when it starts again (on any node), and
  // the ones kept before it, newest first (at most kKeptCheckpointsPerJob - 1).
  std::optional<CheckpointRef> checkpoint;
  std::vector<CheckpointRef> older_checkpoints;
  // A checkpoint asked for (`cnlab checkpoint`, or the server's periodic ones) and not yet taken:
  // the agent takes one, the job running on, when this is later than last_checkpoint_at.
  std::optional<Time> checkpoint_requested_at;
  std::optional<Migration> migration;
  std::optional<PendingRelease> awaiting_release;  // looked at only while Pending

  bool operator==(const JobStatus&) const = default;
};

struct Job {
  ObjectMeta meta;
  JobSpec spec;
  JobStatus status;

  bool operator==(const Job&) const = default;
};

// The host CPU and memory a job holds on `node`: its whole request on a single node; a gang's splits
// over its nodes in proportion to their GPUs (evenly when it has none), rounded up.
struct HostShare {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
};
HostShare host_share(const JobSpec& spec, const std::vector<NodeBinding>& placement, std::string_view node);
// What a live move of a running job copies, and so the memory its target must have free: the larger
// of its request and what its agent last measured its processes to hold (a job that asked for no
// memory, and so has no limit, may hold gigabytes).
int64_t memory_to_move_mib(const Job& job);

// Whether a binding of the job's placement is on `node` (whatever its phase).
bool bound_to(const Job& job, std::string_view node);
// Whether `node` ran the job's latest started attempt (status.attempt_nodes): the nodes that may
// still ship its logs, upload its checkpoint and release it after it was taken off them.
bool ran_latest_attempt_on(const Job& job, std::string_view node);

Json to_json(const Job& job);
// Decodes and validates; the error names the JSON path of the first bad field ("spec.env.1BAD",
// "spec.command[3]", "status.events[0].type") and unknown fields are refused. Absent fields take
// the defaults above, so JSON written before a field existed still decodes.
// A Running job needs a placement and started_at; a Scheduled job needs a placement.
Result<Job> job_from_json(const Json& json);
// Checks of spec.command, spec.env and spec.working_dir, for specs built in code (the decoder
// applies the same ones); errors name "spec.command[i]", "spec.env.NAME", "spec.working_dir".
Status validate_command(const std::vector<std::string>& command);
Status validate_env(const std::map<std::string, std::string>& env);
Status validate_working_dir(std::string_view working_dir);

}  // namespace cnlab::model
