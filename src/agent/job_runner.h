// One job on this node, from its binding to its end: fetch the workspace, start the process under
// the runtime, report it Running, ship its output line by line, stop it when it is cancelled or
// taken off the node, and at the end upload its artifacts, report how it ended and remove its
// files. Each runner is a thread of its own with its own connection to the server.
//
// Everything it needs to carry on after an agent restart is on disk under its directory
// (`<data-dir>/jobs/<name>/`): runner.json (the job, the output cursor the server has
// acknowledged, whether Running was reported), run/ (the runtime's job directory: output, exit
// status), work/ (the workspace, the job's home), artifacts/, checkpoint/.
//
// Checkpoints: what a checkpointable job taken off the node saved in checkpoint/ is uploaded to
// the server and kept on the node (`<data-dir>/checkpoints/<job>`, with `<job>.json` naming the
// digest uploaded and when it was taken). A start restores the kept copy when it is the one the
// job's status names (or newer: its upload failed), else downloads the server's.
//
// Transparent (process) checkpoints, where the runtime has CRIU and the job holds no GPU: the
// job's whole process tree is dumped into process/ (images/, CRIU's; tree/, copies of work/,
// artifacts/ and checkpoint/ taken while the job was stopped or gone; process.json, where the job's
// directory was) and uploaded as a "process" checkpoint, only ever by the agent. Taken when the job
// is pre-empted (it ends there), when one is requested (`cnlab checkpoint`, the server's periodic
// ones: the job is frozen for the dump and the copies, then thawed) and for a migration (it stays
// frozen until the target runs it, or thawed when the migration fails). A start from a process
// checkpoint restores the tree exactly where it was, its paths moved to this node's directory.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <optional>
#include <semaphore>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "agent/files/files.h"
#include "agent/gpu/gpu.h"
#include "agent/node_certificate.h"
#include "agent/page_tunnel.h"
#include "agent/runtime/runtime.h"
#include "agent/save_watch.h"
#include "agent/server_api.h"
#include "model/job.h"

namespace cnlab::agent {

class VgpuNode;

// Counters every runner adds to, for the agent's /metrics.
struct RunnerCounters {
  std::atomic<uint64_t> jobs_started{0};
  std::atomic<uint64_t> jobs_finished{0};
  std::atomic<uint64_t> log_lines_shipped{0};
  std::atomic<uint64_t> artifacts_uploaded{0};
  std::atomic<uint64_t> start_failures{0};
};

// What runners share; set up by the agent and outliving every runner.
struct RunnerContext {
  std::string node;
  std::filesystem::path jobs_dir;  // <data-dir>/jobs
  ServerAddress server;
  std::function<std::string()> token;  // the node credential (it may be renewed)
  Runtime* runtime = nullptr;
  GpuBackend* gpus = nullptr;
  WorkspaceCache* workspaces = nullptr;
  RunAs run_as;
  std::optional<uint32_t> run_as_uid, run_as_gid;  // resolved, for chown of the job's directories
  std::chrono::milliseconds stop_grace{10000};
  // A checkpointable job taken off the node gets SIGUSR1 and this long to save into
  // CNLAB_CHECKPOINT_DIR and exit before SIGTERM. What it saved is kept in `checkpoints_dir/<job>`
  // and handed back when the job starts here again.
  std::chrono::milliseconds checkpoint_grace{30000};
  // How often a migration's source (dumping, sending) and target (restoring) report that they
  // are still at it (migration_progress.h).
  std::chrono::milliseconds migration_progress_every{10000};
  std::filesystem::path checkpoints_dir;  // <data-dir>/checkpoints
  // Post-copy migrations (`cnlab agent --post-copy`): the address this node's page servers listen
  // on for a migration's target to pull the memory from; empty: migrations are stop-and-copy.
  std::string page_server_address;
  // This node's certificate, which live migrations go between agents with (the dump to the
  // target's peer endpoint, the memory through the page gate), and where dumps sent to this node
  // arrive; unset: this node neither sends nor takes live migrations.
  std::optional<NodeTls> node_tls;
  std::filesystem::path incoming_dir;  // <data-dir>/incoming (peer_endpoint.h)
  // Resolves a node name to the host its agent reported (a gang's MASTER_ADDR).
  std::function<std::string(const std::string& node)> node_address;
  RunnerCounters* counters = nullptr;
  // Bounds the jobs being prepared and started at once: a hundred bound together would otherwise
  // start a hundred shims together and time some of them out on a small machine.
  std::counting_semaphore<>* start_slots = nullptr;
  std::function<void()> on_finished;  // called once a runner is done (the agent reaps it)
  // The node's vGPU region (null: jobs run without libcnlab-vgpu.so): a job holding GPUs is
  // registered as a tenant before it starts and removed when its runner is done.
  VgpuNode* vgpu = nullptr;
  // Applies the MIG layouts the scheduler decided now (a job bound into an instance that is not
  // there yet starts after it).
  std::function<void()> apply_layouts;
};

// Puts libcnlab-vgpu.so's variables (`vgpu`, from VgpuNode::add_job) into a job's environment:
// the job's own CNLAB_VGPU_* are dropped, and the library comes first in LD_PRELOAD, before what
// the job preloads itself.
void apply_vgpu_environment(std::vector<std::string>& env, const std::vector<std::string>& vgpu);

class JobRunner {
 public:
  enum class StopReason {
    kNone,
    kCancelled,  // the user cancelled: stop it and report how it ended (the server says Cancelled)
    kShutdown,   // the agent stops its jobs as it stops (cnlab dev, --stop-jobs-on-exit): stop and report
    kGone,       // taken off this node (pre-empted, requeued) or ended elsewhere: stop, report nothing
  };

  // Starts a runner for a job just bound here.
  static std::shared_ptr<JobRunner> launch(const RunnerContext& context, model::Job job);
  // Carries on with a job found on disk after an agent restart; kNotFound when `dir` holds none.
  static Result<std::shared_ptr<JobRunner>> adopt(const RunnerContext& context, const std::filesystem::path& dir);
  // For a job the server says is Running here but this node has no trace of: reports it Failed.
  static std::shared_ptr<JobRunner> report_lost(const RunnerContext& context, model::Job job);

  ~JobRunner();

  const std::string& job_id() const { return job_id_; }
  // The job's current record as this node last heard it.
  void update(const model::Job& job);
  void request_stop(StopReason reason);
  // Stops the thread without touching the job (agent shutdown: the job keeps running and is
  // adopted by the next agent).
  void detach();
  bool finished() const { return finished_.load(); }
  // Stopping because the job was taken off this node, or ended with its run lost and requeued: it
  // may be bound here again.
  bool leaving() const;
  // Asked to stop because the job was cancelled.
  bool cancelling() const;

  // For metrics: the binding on this node (empty until known) and whether the process runs.
  model::NodeBinding binding() const;
  model::HostShare host_share() const;  // the host CPU and memory its job holds on this node
  std::string project() const;
  std::string priority_class() const;
  bool checkpointable() const;
  bool running() const { return running_.load(); }

 private:
  enum class Mode { kLaunch, kAdopt, kLost };
  JobRunner(const RunnerContext& context, model::Job job, std::filesystem::path dir, Mode mode);
  void run();
  void run_steps();
  // The steps of run(); each returns false when the runner should stop where it is.
  bool prepare_and_start();
  void supervise();
  void finish(const JobStatus& status);
  // Tells the server the job, taken off this node, no longer runs here, with the checkpoint it
  // stored as it stopped (`digest`) or why there is none: a pre-empted job waits for this before it
  // starts again (server/job_release.h). Retried while the server is unreachable.
  void report_released(const std::string& digest, const std::string& why);
  // `requeue`: the run was lost through no fault of the job; the server puts it back in the queue.
  bool report(const std::string& phase, std::optional<int> exit_code, std::optional<int> signal,
              const std::string& message, bool requeue = false);
  bool ship_logs(OutputReader& reader, bool until_end);
  bool post_lines(const Json& lines, size_t count);
  void note(const std::string& text);  // a line in the job's log from the agent itself
  void upload_artifacts();
  // Packs `source` and uploads it (PUT /v1/jobs/{id}/checkpoint): what a checkpointable job taken
  // off the node saved in `dir_/checkpoint` (kind "files"), or a process checkpoint in
  // `dir_/process` ("process"). The digest uploaded, or "" when it could not be.
  std::string upload_checkpoint(const std::filesystem::path& source, const std::string& taken_at,
                                const std::string& kind);
  // The upload's headers that say what `source` holds: its kind, and for a process checkpoint how
  // many processes it holds with their GPU state suspended.
  static std::map<std::string, std::string> checkpoint_headers(const std::filesystem::path& source,
                                                               const std::string& kind);
  // A checkpoint packed into a file in the job's directory, removed when this goes: uploaded or
  // sent from there, never read into memory (a process dump holds the job's whole memory).
  class PackedCheckpoint {
   public:
    PackedCheckpoint(std::filesystem::path archive, PackResult packed)
        : archive_(std::move(archive)), packed_(std::move(packed)) {}
    PackedCheckpoint(PackedCheckpoint&& other) noexcept
        : archive_(std::exchange(other.archive_, {})), packed_(std::move(other.packed_)) {}
    PackedCheckpoint& operator=(PackedCheckpoint&&) = delete;
    ~PackedCheckpoint();
    const std::filesystem::path& archive() const { return archive_; }
    const std::string& digest() const { return packed_.digest; }
    int64_t archive_bytes() const { return packed_.archive_bytes; }
    int64_t file_count() const { return packed_.file_count; }

   private:
    std::filesystem::path archive_;
    PackResult packed_;
  };
  // Packs `source` into an archive of at most `max_archive_bytes` (the receiver's limit) at gzip
  // level `compression_level`.
  Result<PackedCheckpoint> pack_checkpoint(const std::filesystem::path& source, int64_t max_archive_bytes,
                                           int compression_level);
  // Why this job cannot be checkpointed transparently here ("" when it can).
  std::string transparent_refusal() const;
  // Dumps the job into dir_/process (replacing an older one) and copies its directories beside
  // the images while it is stopped or gone. With `lazy` (post-copy, kLeaveStopped only), the
  // memory stays out of the images and a page server at context_.page_server_address serves it:
  // *lazy is set to the dump under way.
  Result<JobHandle::Checkpoint> take_process_checkpoint(JobHandle::AfterDump after,
                                                        std::unique_ptr<JobHandle::LazyDump>* lazy = nullptr);
  // A checkpoint was requested: a process one (the job frozen meanwhile), or SIGUSR1 to a job
  // that saves its own.
  void checkpoint_on_request();
  // Measures the host memory the job's processes hold (JobHandle::memory_bytes) every
  // kMemoryCheckEvery and reports it (memory_used_mib) when it changed by a tenth or 64 MiB,
  // whichever is more, since the last report: what the scheduler prices a move of the job by.
  void report_memory();
  // A requested checkpoint that was not taken: noted in the job's log, and a CheckpointFailed
  // event on the server (what `cnlab checkpoint` waits for besides a Checkpointed one).
  void checkpoint_not_taken(const std::string& why);
  // Uploads CNLAB_CHECKPOINT_DIR as a `files` checkpoint once the job's save that save_watch_
  // waits for is done, or notes that it saved nothing.
  void upload_when_saved();
  // The source's side of a migration; returns once the job runs elsewhere (then it is stopped
  // here) or is back here (thawed).
  void migrate_out(OutputReader* reader, const model::Migration& move);
  // Whether the server bound the job to its target with dump `digest` (a hand-over whose answer
  // was lost but which took effect): then the source must not thaw it.
  bool handed_over_already(const std::string& digest);
  // Where node `node`'s agent takes migrating jobs (its peer endpoint), as its node record says.
  Result<HostPort> peer_endpoint_of(const std::string& node);
  // Before a start from a process checkpoint: the directories of the dump put in place and the
  // images' paths moved here; the images to restore from, or an error when it cannot be.
  // Also pairs the GPUs the dump's CUDA processes were suspended from with this binding's
  // (`device_map`, cuda-checkpoint's); fails when their numbers differ.
  Result<std::filesystem::path> prepare_restore(const model::NodeBinding& binding,
                                                std::vector<std::pair<std::string, std::string>>* device_map);
  // Before a start: puts the job's checkpoint into `checkpoint` (absent): the copy kept on this
  // node when it is the one the server names (or newer), else the server's, downloaded and
  // verified. Returns whether one was restored; sets start_note_ to say which (or why none).
  bool restore_checkpoint(const model::Job& job, const std::filesystem::path& checkpoint);
  Status download_checkpoint(const model::CheckpointRef& ref, const std::filesystem::path& checkpoint);
  Status save_state();
  void save_cursor();  // save_state, at most once a second
  bool still_here();   // asks the server whether the job is still active on this node
  // An agent that died while the job was frozen for a dump (a migration, a checkpoint) left it
  // frozen; the one that adopts it asks the server (at most twice a second) until it can tell
  // what to do. Thaws it when the job is still active here and no dump of it was handed over from
  // here; a handed-over dump's migration decides (rolled back: thawed; taken: the job is gone from
  // here and is stopped, without a dump, since a copy runs elsewhere). True once thawed.
  bool settle_adopted_freeze();
  // Why a job restored post-copy lacks memory (its pull failed), or "" (it did not, or was not one).
  std::string pages_not_pulled();
  // Sleeps up to `duration` or until detached; false when detached.
  bool pause(std::chrono::milliseconds duration);
  bool detached() const { return detached_.load(); }

  RunnerContext context_;
  const std::string job_id_;
  const std::filesystem::path dir_;
  Mode mode_;
  ServerApi api_;

  mutable std::mutex mutex_;
  model::Job job_;
  StopReason stop_reason_ = StopReason::kNone;
  bool requeued_ = false;  // its run was lost and it went back to the queue (it may come back here)
  std::condition_variable wake_;

  std::optional<JobHandle> handle_;
  OutputCursor acked_;            // what the server has stored
  // Shipped lines' numbers (the server's node_seq, which must grow): output record N is
  // seq_base_ + N * kNoteSlots, and the agent's notes take the numbers between the last record
  // shipped and the next, so that a note never takes the number of an output line still to come
  // (the server drops a line not above the last number it stored from this node).
  static constexpr uint64_t kNoteSlots = 1024;
  uint64_t shipped_seq(uint64_t record) const { return seq_base_ + record * kNoteSlots; }
  uint64_t notes_after_ = 0;      // notes posted since the record acked_ names
  uint64_t notes_after_record_ = 0;
  uint64_t seq_base_ = 0;         // the attempt's numbers start here (see the constructor)
  bool reported_running_ = false;
  std::chrono::steady_clock::time_point cursor_saved_at_{};
  std::string last_stderr_;       // for the message of a failed job
  std::string start_note_;        // how it started (its checkpoint), sent with the Running report
  std::string restored_kind_;     // the kind of checkpoint restore_checkpoint put in place ("" none)
  // prepare_restore: the tenant region a dump with libcnlab-vgpu.so attached carried ("" none).
  std::filesystem::path vgpu_tenant_to_restore_;
  std::optional<Time> handled_checkpoint_request_;
  std::chrono::steady_clock::time_point next_memory_check_{};
  int64_t reported_memory_mib_ = -1;  // -1: none reported by this runner yet
  // After SIGUSR1 on a request: the job's own save, uploaded once it is done (upload_when_saved).
  std::optional<SaveWatch> save_watch_;
  std::optional<Time> handled_migration_;      // the requested_at of the latest migration acted on
  // The job as the server has it now, not only as this node saved it: an adopted runner's copy may
  // name a migration or checkpoint request the server has since ended (a requeue while the agent
  // was down), so it acts on neither until the server's list confirms the job here (update()).
  bool confirmed_by_server_ = true;  // guarded by mutex_
  // Adopted and not (yet) confirmed: taken off the node while no agent watched, if it stops now.
  bool stale_copy() const;
  std::atomic<bool> migrating_out_{false};     // frozen for a migration: stops wait for its outcome
  std::atomic<bool> process_dumped_{false};    // a pre-emption dumped it into dir_/process
  std::atomic<bool> migrated_away_{false};     // the target runs it: nothing to upload here
  bool pulling_pages_ = false;                 // restored post-copy: its memory may yet fail to arrive
  std::atomic<bool> frozen_at_adopt_{false};   // adopted frozen, not yet thawed: see settle_adopted_freeze
  std::chrono::steady_clock::time_point freeze_checked_at_{};
  // A post-copy target's way to the source's page gate, while `criu lazy-pages` pulls the memory.
  std::unique_ptr<PageTunnel> page_tunnel_;
  std::thread stopper_;
  std::atomic<bool> stop_sent_{false};
  std::atomic<bool> running_{false};
  std::atomic<bool> finished_{false};
  std::atomic<bool> detached_{false};
  std::thread thread_;
};

}  // namespace cnlab::agent
