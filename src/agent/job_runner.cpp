#include "agent/job_runner.h"

#include "agent/migration_progress.h"
#include "agent/page_tunnel.h"
#include "agent/peer_endpoint.h"

#include "agent/vgpu_node.h"

#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>

#include "agent/job_env.h"
#include "common/time.h"

namespace cnlab::agent {
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

constexpr size_t kMaxLinesPerPost = 5000;
constexpr size_t kMaxBytesPerPost = 512 << 10;  // well under the server's 1 MiB JSON body limit
constexpr size_t kMaxMessageBytes = 1000;
constexpr auto kMemoryCheckEvery = std::chrono::seconds(10);  // see report_memory

const char* stop_reason_name(JobRunner::StopReason reason) {
  switch (reason) {
    case JobRunner::StopReason::kNone: return "none";
    case JobRunner::StopReason::kCancelled: return "cancelled";
    case JobRunner::StopReason::kShutdown: return "shutdown";
    case JobRunner::StopReason::kGone: return "gone";
  }
  return "?";
}

std::string now_text() {
  return format_rfc3339(std::chrono::time_point_cast<std::chrono::seconds>(std::chrono::system_clock::now()));
}

// Percent-encodes an artifact path for a URL, keeping '/' between segments.
std::string encode_path(std::string_view path) {
  std::string out;
  for (unsigned char c : path) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

// Hands the job's directories to the user it runs as (links are changed, never followed).
uid_t chown_uid;
gid_t chown_gid;
int chown_entry(const char* path, const struct stat*, int, struct FTW*) {
  (void)::lchown(path, chown_uid, chown_gid);
  return 0;
}
std::mutex chown_mutex;  // nftw's callback has no context pointer
void chown_tree(const fs::path& dir, uid_t uid, gid_t gid) {
  std::lock_guard lock(chown_mutex);
  chown_uid = uid;
  chown_gid = gid;
  ::nftw(dir.c_str(), chown_entry, 32, FTW_PHYS);
}

Result<std::string> read_fd(int fd) {
  std::string out;
  char buffer[64 << 10];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::internal(std::string("read failed: ") + std::strerror(errno));
    if (n == 0) return out;
    out.append(buffer, static_cast<size_t>(n));
  }
}

std::string truncate(std::string text) {
  if (text.size() > kMaxMessageBytes) text.resize(kMaxMessageBytes);
  return text;
}

bool is_gone(const Error& error) {
  return error.code == ErrorCode::kNotFound || error.code == ErrorCode::kConflict ||
         error.code == ErrorCode::kPermissionDenied;
}

}  // namespace

JobRunner::JobRunner(const RunnerContext& context, model::Job job, fs::path dir, Mode mode)
    : context_(context),
      job_id_(job.meta.name),
      dir_(std::move(dir)),
      mode_(mode),
      api_(context.server, context.token()),
      job_(std::move(job)) {
  // The server keeps one sequence per node and job: a later run of the job on this node (after a
  // pre-emption) numbers its lines above the earlier runs' (attempts counts the starts before it).
  // Records (below 2^32) times kNoteSlots (2^10) fit below 2^42.
  seq_base_ = static_cast<uint64_t>(job_.status.attempts) << 42;
}

JobRunner::~JobRunner() {
  detach();
  if (thread_.joinable()) thread_.join();
  if (stopper_.joinable()) stopper_.join();
}

std::shared_ptr<JobRunner> JobRunner::launch(const RunnerContext& context, model::Job job) {
  fs::path dir = context.jobs_dir / cgroup_name_for(job.meta.name);
  std::shared_ptr<JobRunner> runner(new JobRunner(context, std::move(job), dir, Mode::kLaunch));
  runner->thread_ = std::thread([r = runner.get()] { r->run(); });
  return runner;
}

std::shared_ptr<JobRunner> JobRunner::report_lost(const RunnerContext& context, model::Job job) {
  std::shared_ptr<JobRunner> runner(new JobRunner(context, std::move(job), fs::path(), Mode::kLost));
  runner->thread_ = std::thread([r = runner.get()] { r->run(); });
  return runner;
}

Result<std::shared_ptr<JobRunner>> JobRunner::adopt(const RunnerContext& context, const fs::path& dir) {
  std::ifstream in(dir / "runner.json");
  if (!in) return Error::not_found("dir", dir.string(), "no runner.json: not a job directory");
  std::stringstream text;
  text << in.rdbuf();
  Json state = Json::parse(text.str(), nullptr, false);
  if (!state.is_object() || !state.contains("job")) {
    return Error::invalid_argument("runner.json", (dir / "runner.json").string(), "not a runner state");
  }
  auto job = model::job_from_json(state["job"]);
  if (!job) return job.error();
  if (!fs::exists(dir / "run" / "spec.json")) {
    // It never started: start it again from scratch.
    (void)safe_remove_tree(dir.string());
    return launch(context, std::move(*job));
  }
  auto handle = context.runtime->adopt(dir / "run");
  if (!handle) return handle.error();
  std::shared_ptr<JobRunner> runner(new JobRunner(context, std::move(*job), dir, Mode::kAdopt));
  runner->confirmed_by_server_ = false;
  runner->handle_ = *handle;
  runner->acked_.seq = state.value("acked_seq", uint64_t{0});
  runner->acked_.offset = state.value("acked_offset", uint64_t{0});
  runner->reported_running_ = state.value("reported_running", false);
  runner->seq_base_ = state.value("seq_base", uint64_t{0});
  runner->running_ = handle->status().state == JobState::kRunning;
  runner->frozen_at_adopt_ = runner->running_ && handle->frozen();
  runner->thread_ = std::thread([r = runner.get()] { r->run(); });
  return runner;
}

void JobRunner::update(const model::Job& job) {
  std::lock_guard lock(mutex_);
  job_ = job;
  confirmed_by_server_ = true;
}

void JobRunner::request_stop(StopReason reason) {
  std::lock_guard lock(mutex_);
  // Frozen for a migration, the job is bound to its target meanwhile: migrate_out decides.
  if (reason == StopReason::kGone && migrating_out_) return;
  // Gone wins over cancelled: a job taken off the node is not reported.
  if (stop_reason_ == StopReason::kNone || reason == StopReason::kGone) stop_reason_ = reason;
  wake_.notify_all();
}

void JobRunner::detach() {
  detached_ = true;
  api_.interrupt();
  std::lock_guard lock(mutex_);
  wake_.notify_all();
}

model::NodeBinding JobRunner::binding() const {
  std::lock_guard lock(mutex_);
  for (const auto& b : job_.status.placement) {
    if (b.node == context_.node) return b;
  }
  return {};
}

model::HostShare JobRunner::host_share() const {
  std::lock_guard lock(mutex_);
  return model::host_share(job_.spec, job_.status.placement, context_.node);
}

bool JobRunner::still_here() {
  auto job = api_.call("GET", "/v1/jobs/" + job_id_);
  if (!job) return job.error().code == ErrorCode::kUnavailable;  // cannot tell: keep trying
  auto decoded = model::job_from_json(*job);
  if (!decoded) return false;
  bool active = decoded->status.phase == model::JobPhase::kScheduled || decoded->status.phase == model::JobPhase::kRunning;
  return active && model::bound_to(*decoded, context_.node);
}

std::string JobRunner::pages_not_pulled() {
  const fs::path images = dir_ / "process" / "images";
  std::error_code ec;
  if (!fs::exists(images / kLazyPagesLog, ec)) return "";  // not restored post-copy
  // The job dies of the pages it lacks as `criu lazy-pages` exits; its reaper writes why just after.
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while (!fs::exists(images / kPagesNotPulledFile, ec)) {
    if (std::chrono::steady_clock::now() > deadline) return "";
    std::this_thread::sleep_for(20ms);
  }
  std::ifstream in(images / kPagesNotPulledFile);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool JobRunner::settle_adopted_freeze() {
  const auto now = std::chrono::steady_clock::now();
  if (now - freeze_checked_at_ < 500ms) return false;
  freeze_checked_at_ = now;
  auto answer = api_.call("GET", "/v1/jobs/" + job_id_);
  if (!answer) return false;  // gone from here (stopped as such) or no answer (asked again)
  auto job = model::job_from_json(*answer);
  if (!job) return false;
  if (job->status.migration && job->status.migration->from == context_.node) return false;  // its outcome decides
  const bool here = model::bound_to(*job, context_.node);
  const bool active = job->status.phase == model::JobPhase::kScheduled || job->status.phase == model::JobPhase::kRunning;
  if (!here || !active) return false;
  if (auto thawed = handle_->thaw(); !thawed) {
    spdlog::error("job left frozen not thawed job=\"{}\" error=\"{}\"", job_id_, thawed.error().to_string());
    return false;
  }
  frozen_at_adopt_ = false;
  note("the agent restarted while the job was frozen for a dump; it carries on here");
  return true;
}

bool JobRunner::stale_copy() const {
  std::lock_guard lock(mutex_);
  return !confirmed_by_server_;
}

bool JobRunner::leaving() const {
  std::lock_guard lock(mutex_);
  return (stop_reason_ == StopReason::kGone && !migrating_out_) || requeued_;
}

bool JobRunner::cancelling() const {
  std::lock_guard lock(mutex_);
  return stop_reason_ == StopReason::kCancelled || stop_reason_ == StopReason::kShutdown;
}

bool JobRunner::checkpointable() const {
  std::lock_guard lock(mutex_);
  return job_.spec.checkpointable;
}

std::string JobRunner::project() const {
  std::lock_guard lock(mutex_);
  return job_.spec.project;
}

std::string JobRunner::priority_class() const {
  std::lock_guard lock(mutex_);
  return job_.spec.priority_class;
}

bool JobRunner::pause(std::chrono::milliseconds duration) {
  std::unique_lock lock(mutex_);
  wake_.wait_for(lock, duration, [&] { return detached_.load(); });
  return !detached_;
}

void JobRunner::run() {
  run_steps();
  if (finished_ && context_.on_finished) context_.on_finished();
}

void JobRunner::run_steps() {
  if (mode_ == Mode::kLost) {
    report("Failed", std::nullopt, std::nullopt,
           fmt::format("node {} has no record of this job's process (lost across an agent or node restart)",
                       context_.node));
    finished_ = true;
    return;
  }
  if (mode_ == Mode::kLaunch && !prepare_and_start()) {
    finished_ = true;
    return;
  }
  supervise();
}

void JobRunner::save_cursor() {
  // At most once a second: after a crash the lines since are sent again, and the server keeps
  // one copy (it deduplicates by this node's sequence numbers).
  auto now = std::chrono::steady_clock::now();
  if (now - cursor_saved_at_ < 1s) return;
  cursor_saved_at_ = now;
  (void)save_state();
}

Status JobRunner::save_state() {
  Json state;
  {
    std::lock_guard lock(mutex_);
    state = {{"job", model::to_json(job_)},
             {"acked_seq", acked_.seq},
             {"acked_offset", acked_.offset},
             {"reported_running", reported_running_},
             {"seq_base", seq_base_}};
  }
  std::string text = state.dump();
  fs::path temp = dir_ / "runner.json.tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << text;
    if (!out) return Error::internal("cannot write " + temp.string());
  }
  std::error_code ec;
  fs::rename(temp, dir_ / "runner.json", ec);
  if (ec) return Error::internal("cannot write " + (dir_ / "runner.json").string() + ": " + ec.message());
  return Status::ok();
}

// Puts the vGPU variables into a job's environment. They are CNLab's, not the job's: a job's own
// CNLAB_VGPU_* (naming another tenant, say) is dropped, and the library goes first in LD_PRELOAD
// with whatever the job preloads after it (the loader reads the first LD_PRELOAD entry only).
void apply_vgpu_environment(std::vector<std::string>& env, const std::vector<std::string>& vgpu) {
  std::string preload;
  std::erase_if(env, [&](const std::string& e) {
    if (e.rfind("LD_PRELOAD=", 0) == 0) {
      preload = e.substr(11);
      return true;
    }
    return e.rfind("CNLAB_VGPU_", 0) == 0;
  });
  for (const std::string& v : vgpu) {
    if (v.rfind("LD_PRELOAD=", 0) == 0 && !preload.empty()) env.push_back(v + ":" + preload);
    else env.push_back(v);
  }
}

bool JobRunner::prepare_and_start() {
  model::Job job;
  {
    std::lock_guard lock(mutex_);
    job = job_;
  }
  auto fail = [&](const std::string& message) {
    spdlog::warn("job not started job=\"{}\" error=\"{}\"", job_id_, message);
    if (context_.counters) ++context_.counters->start_failures;
    note(message);
    report("Failed", std::nullopt, std::nullopt, truncate(message));
    if (context_.vgpu) context_.vgpu->remove_job(job_id_);
    (void)safe_remove_tree(dir_.string());
    return false;
  };
  if (job.status.cancel_requested) {
    report("Failed", std::nullopt, std::nullopt, "cancelled before it started");
    return false;
  }
  if (context_.start_slots) context_.start_slots->acquire();
  struct Release {
    std::counting_semaphore<>* slots;
    ~Release() {
      if (slots) slots->release();
    }
  } release{context_.start_slots};
  std::error_code ec;
  if (fs::exists(dir_, ec)) (void)safe_remove_tree(dir_.string());  // a start that died half-way
  fs::create_directories(dir_, ec);
  if (ec) return fail("cannot create " + dir_.string() + ": " + ec.message());
  ::chmod(dir_.c_str(), 0711);  // the job's user passes through to its own directories only
  if (auto saved = save_state(); !saved) return fail(saved.error().message);

  fs::path work = dir_ / "work", artifacts = dir_ / "artifacts", checkpoint = dir_ / "checkpoint";
  if (job.spec.workspace) {
    const std::string& digest = job.spec.workspace->digest;
    auto fetch = [&](const std::string& temp) -> Status {
      // Naming the job lets the server check that one job, not every job it holds.
      auto response = api_.raw("GET", "/v1/workspaces/" + digest + "?job=" + job_id_);
      if (!response) return response.error();
      if (response->status != 200) return net::error_from_response(response->status, response->body, "GET workspace");
      std::ofstream out(temp, std::ios::binary | std::ios::trunc);
      out.write(response->body.data(), static_cast<std::streamsize>(response->body.size()));
      if (!out) return Error::internal("cannot write " + temp);
      return Status::ok();
    };
    auto unpacked = context_.workspaces->unpack_to(digest, fetch, work.string());
    if (!unpacked) return fail("workspace " + digest + ": " + unpacked.error().to_string());
  } else {
    fs::create_directories(work, ec);
  }
  fs::create_directories(artifacts, ec);
  bool resumed = false;
  if (job.status.migration && !job.status.migration->from.empty()) {
    // Live-migrated here: from the dump its source streamed to this node, nothing else.
    const model::Migration& move = *job.status.migration;
    auto taken = take_incoming_dump(context_.incoming_dir, job_id_, move.from, move.dump_digest, dir_ / "process");
    if (!taken) return fail("migration: " + taken.error().message);
    restored_kind_ = "process";
    start_note_ = "dump " + move.dump_digest + " received from " + move.from;
    resumed = true;
  } else {
    resumed = restore_checkpoint(job, checkpoint);
  }
  std::optional<fs::path> restore_from;
  std::vector<std::pair<std::string, std::string>> gpu_device_map;
  if (resumed && restored_kind_ == "process") {
    const model::NodeBinding bound = binding();
    if (context_.apply_layouts && gpu_uuids(bound, context_.gpus->gpus()).size() < bound.gpus.size()) {
      context_.apply_layouts();  // moved into a MIG instance the heartbeat has not created yet
    }
    auto images = prepare_restore(bound, &gpu_device_map);
    if (images) {
      restore_from = *images;
    } else {
      start_note_ += "; its processes not restored (" + images.error().message + "): started again from the beginning";
      spdlog::warn("job process checkpoint not restored job=\"{}\" error=\"{}\"", job_id_, images.error().to_string());
      if (job.status.migration) return fail("migration: " + images.error().message);
    }
  }
  fs::create_directories(checkpoint, ec);
  if (ec) return fail("cannot create the job's directories under " + dir_.string() + ": " + ec.message());
  for (const auto& d : {work, artifacts, checkpoint}) ::chmod(d.c_str(), 0700);
  if (context_.run_as_uid) {
    for (const auto& d : {work, artifacts, checkpoint}) chown_tree(d, *context_.run_as_uid, context_.run_as_gid.value_or(0));
  }
  fs::path working_dir = work / job.spec.working_dir;
  if (!fs::is_directory(working_dir, ec)) {
    return fail(fmt::format("working_dir \"{}\" is not a directory in the workspace", job.spec.working_dir));
  }

  // This node's part of the placement, and where rank 0 is.
  int rank = -1;
  for (size_t i = 0; i < job.status.placement.size(); ++i) {
    if (job.status.placement[i].node == context_.node) rank = static_cast<int>(i);
  }
  if (rank < 0) return fail("the job is not bound to node " + context_.node);
  const model::NodeBinding& binding = job.status.placement[static_cast<size_t>(rank)];
  bool simulated = context_.gpus->kind() == "simulated";
  auto devices = visible_devices(binding, context_.gpus->gpus(), simulated);
  if (!devices && devices.error().code == ErrorCode::kFailedPrecondition && context_.apply_layouts) {
    context_.apply_layouts();  // bound into a MIG instance the heartbeat has not created yet
    devices = visible_devices(binding, context_.gpus->gpus(), simulated);
  }
  if (!devices) return fail(devices.error().to_string());
  JobEnvInput env;
  env.node = context_.node;
  env.rank = rank;
  env.nodes = static_cast<int>(job.status.placement.size());
  if (env.nodes > 1) env.master_address = context_.node_address(job.status.placement.front().node);
  env.devices = *devices;
  env.simulated = simulated;
  // Where the job sees its directories: where the runtime can, at the same paths on every node
  // (kJobViewRoot), so that a restore on a node keeping them elsewhere leaves its environment, its
  // working directory and what it derived from them (sys.path) pointing at them; else where they are.
  const bool view = context_.runtime->capabilities().job_view;
  const fs::path view_root(kJobViewRoot);
  const fs::path seen_work = view ? view_root / "work" : work;
  env.home = seen_work.string();
  env.artifacts_dir = view ? (view_root / "artifacts").string() : artifacts.string();
  env.checkpoint_dir = view ? (view_root / "checkpoint").string() : checkpoint.string();

  ProcessSpec spec;
  spec.job_id = job_id_;
  spec.argv = job.spec.command;
  spec.env = job_environment(job, env);
  if (resumed) spec.env.push_back("CNLAB_RESUMED=1");
  if (context_.vgpu && !binding.gpus.empty()) {
    // Its VRAM quota and compute share, enforced inside its processes by libcnlab-vgpu.so.
    auto vgpu_env = context_.vgpu->add_job(job_id_, binding, context_.gpus->gpus(), context_.run_as_uid, context_.run_as_gid);
    if (!vgpu_env) return fail("vGPU: " + vgpu_env.error().to_string());
    apply_vgpu_environment(spec.env, *vgpu_env);
  }
  if (restore_from && !vgpu_tenant_to_restore_.empty()) {
    // What its processes hold on their GPUs, counted again here before they come back.
    Status carried = context_.vgpu && !binding.gpus.empty()
                         ? context_.vgpu->restore_tenant(job_id_, vgpu_tenant_to_restore_)
                         : Status(Error::failed_precondition("the job holds no GPU here to count it on"));
    if (!carried) {
      const std::string why = "its vGPU tenant region could not be restored: " + carried.error().message;
      if (job.status.migration) return fail("migration: " + why);
      spdlog::warn("job process checkpoint not restored job=\"{}\" error=\"{}\"", job_id_, why);
      start_note_ += "; its processes not restored (" + why + "): started again from the beginning";
      restore_from.reset();
    }
  }
  spec.working_dir = (seen_work / job.spec.working_dir).string();
  if (view) {
    spec.view_mounts = {{work, env.home}, {artifacts, env.artifacts_dir}, {checkpoint, env.checkpoint_dir}};
  }
  spec.limits.cpu_milli = job.spec.cpu_milli;
  spec.limits.memory_bytes = job.spec.memory_mib * (int64_t{1} << 20);
  spec.job_dir = dir_ / "run";
  spec.run_as = context_.run_as;
  if (restore_from) {
    spec.restore_from = *restore_from;
    spec.gpu_device_map = gpu_device_map;
  }
  if (restore_from && job.status.migration && !job.status.migration->pages_from.empty()) {
    // Post-copy: `criu lazy-pages` pulls the memory through a tunnel to the source's page gate.
    const model::Migration& move = *job.status.migration;
    auto gate = parse_host_port(move.pages_from, "migration.pages_from");
    if (!context_.node_tls) return fail("migration: this node has no node certificate to pull the job's memory with");
    auto tunnel = gate ? PageTunnel::open(*gate, *context_.node_tls, move.from)
                       : Result<std::unique_ptr<PageTunnel>>(gate.error());
    if (!tunnel) return fail("migration: the source's page gate: " + tunnel.error().message);
    page_tunnel_ = std::move(*tunnel);
    spec.pages_from = "127.0.0.1:" + std::to_string(page_tunnel_->port());
    pulling_pages_ = true;
  }
  // The target of a migration tells the server it is still restoring (memory comes back at a few
  // seconds per GiB), so that --migration-timeout counts from its latest word, as on the source.
  std::optional<MigrationProgress> restoring;
  if (restore_from && job.status.migration) {
    restoring.emplace(context_.server, context_.token(), job_id_, context_.migration_progress_every);
    restoring->stage("restoring on " + context_.node);
    // A move the server gave up meanwhile (timed out, rolled back to the source) is not restored
    // on: its restore could otherwise hold here until the checkpoint timeout. This agent hears it
    // as the job leaving the node, or from the server's refusal of its next word of progress.
    spec.give_up_restore = [this, &restoring] { return leaving() || restoring->refused(); };
  }
  auto handle = context_.runtime->start(spec);
  if (context_.vgpu && !vgpu_tenant_to_restore_.empty()) context_.vgpu->restored(job_id_);  // locks back, or gone
  const bool unwanted = restoring && spec.give_up_restore();
  restoring.reset();
  spec.give_up_restore = nullptr;
  if (!handle && unwanted) {
    // Not a failed start: the server binds the job elsewhere now and expects no word of it.
    spdlog::info("job not restored job=\"{}\": its move was given up meanwhile ({})", job_id_, handle.error().message);
    if (context_.vgpu) context_.vgpu->remove_job(job_id_);
    (void)safe_remove_tree(dir_.string());
    return false;
  }
  if (!handle && restore_from && !job.status.migration) {
    // The dump does not restore here: the job starts again, its directories as they were then.
    spdlog::warn("job restore failed job=\"{}\" error=\"{}\"; starting it again", job_id_, handle.error().to_string());
    start_note_ += "; its processes could not be restored (" + handle.error().message + "): started again";
    (void)safe_remove_tree(spec.job_dir.string());
    spec.restore_from.clear();
    handle = context_.runtime->start(spec);
  }
  if (!handle) return fail("could not start " + (spec.argv.empty() ? "" : spec.argv[0]) + ": " + handle.error().message);
  handle_ = *handle;
  running_ = true;
  if (context_.counters) ++context_.counters->jobs_started;
  spdlog::info("job started job=\"{}\" node=\"{}\" devices=\"{}\" cgroups={} namespaces={}", job_id_, context_.node,
               fmt::join(*devices, ","), to_string(handle->isolation().cgroups), handle->isolation().namespaces);
  (void)save_state();
  return true;
}

void JobRunner::supervise() {
  Result<OutputReader> reader = Error::internal("not opened");
  for (int attempt = 0; !detached(); ++attempt) {
    reader = OutputReader::open(handle_->output_path(), acked_);
    if (reader) break;
    if (attempt == 50) {
      spdlog::error("job output unreadable job=\"{}\" error=\"{}\"", job_id_, reader.error().to_string());
      break;
    }
    pause(100ms);
  }
  if (!reported_running_ && !detached()) {
    if (report("Running", std::nullopt, std::nullopt, truncate(start_note_))) {
      reported_running_ = true;
      (void)save_state();
    } else if (!detached()) {
      request_stop(StopReason::kGone);
    }
  }
  while (!detached()) {
    StopReason reason;
    {
      std::lock_guard lock(mutex_);
      reason = stop_reason_;
    }
    if (reason != StopReason::kNone && !stop_sent_.exchange(true)) {
      // A copy adopted frozen, or adopted and taken off the node while no agent watched (the server
      // never confirmed it since), may be running elsewhere already: it is stopped, never dumped
      // (its checkpoint would be older than the job it claims to be).
      const bool stale = stale_copy();
      bool checkpoint =
          reason == StopReason::kGone && checkpointable() && !migrated_away_ && !frozen_at_adopt_ && !stale;
      std::string refusal = checkpoint ? transparent_refusal() : "";
      // A frozen copy (moved away, or found frozen after a restart) is killed at once, without
      // SIGTERM's grace: stopped, it could not act on it, and a copy whose job runs elsewhere must
      // never run again.
      const bool at_once = migrated_away_ || frozen_at_adopt_ || stale;
      spdlog::info("job stopping job=\"{}\" reason={} checkpoint={} transparent={} at_once={}", job_id_,
                   stop_reason_name(reason), checkpoint, checkpoint && refusal.empty(),
                   at_once);
      stopper_ = std::thread([this, handle = *handle_, grace = at_once ? std::chrono::milliseconds(0) : context_.stop_grace,
                              checkpoint, transparent = refusal.empty(), checkpoint_grace = context_.checkpoint_grace] {
        // Transparently where it can be (the job ends with the dump), else its own save on SIGUSR1.
        if (checkpoint && transparent) {
          auto taken = take_process_checkpoint(JobHandle::AfterDump::kStop);
          process_dumped_ = taken.has_value();
          if (!taken) {
            spdlog::warn("job process checkpoint failed job=\"{}\" error=\"{}\"; falling back to SIGUSR1", job_id_,
                         taken.error().to_string());
          }
        }
        if (checkpoint && !process_dumped_) {
          // No grace where nothing was told to save: a job without a handler goes straight to SIGTERM.
          if (auto sent = handle.send_checkpoint_signal(); sent) {
            (void)handle.wait(checkpoint_grace);
          } else {
            spdlog::warn("job checkpoint signal not sent job=\"{}\" error=\"{}\"", job_id_, sent.error().to_string());
          }
        }
        (void)handle.stop(grace);
      });
    }
    // Nothing moves or dumps a copy adopted frozen until the server says whose it is.
    const bool settled = !frozen_at_adopt_ || settle_adopted_freeze();
    if (reason == StopReason::kNone && reported_running_ && settled) {
      std::optional<model::Migration> migration;
      std::optional<Time> requested;
      {
        std::lock_guard lock(mutex_);
        const model::JobStatus& status = job_.status;
        if (confirmed_by_server_) {  // see confirmed_by_server_
          migration = status.migration;
          // A request that a checkpoint since (maybe the one it was restored from) already answers is done.
          const auto& last = status.last_checkpoint_at;
          if (status.checkpoint_requested_at && (!last || *status.checkpoint_requested_at > *last)) {
            requested = status.checkpoint_requested_at;
          }
        }
      }
      if (migration && migration->from.empty() && migration->to != context_.node &&
          handled_migration_ != migration->requested_at) {
        handled_migration_ = migration->requested_at;
        migrate_out(reader ? &*reader : nullptr, *migration);
        continue;
      }
      if (requested && handled_checkpoint_request_ != requested) {
        handled_checkpoint_request_ = requested;
        checkpoint_on_request();
      }
      if (save_watch_) upload_when_saved();
      report_memory();
    }
    if (reader && !ship_logs(*reader, false)) request_stop(StopReason::kGone);
    if (pulling_pages_ && fs::exists(dir_ / "process" / "images" / kPagesNotPulledFile)) {
      // Its memory will not all arrive: on the first page it lacks it would crash, or spin for good.
      pulling_pages_ = false;
      spdlog::error("job killed: its memory did not all arrive job=\"{}\"", job_id_);
      (void)handle_->signal(SIGKILL);
    }
    JobStatus status = handle_->status();
    if (status.state != JobState::kRunning) {
      if (reader) (void)ship_logs(*reader, true);
      finish(status);
      return;
    }
    if (reader) {
      reader->wait(100ms);
    } else {
      pause(100ms);
    }
  }
}

void JobRunner::report_memory() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_memory_check_) return;
  next_memory_check_ = now + kMemoryCheckEvery;
  auto bytes = handle_->memory_bytes();
  if (!bytes) return;
  const int64_t mib = *bytes >> 20;
  const int64_t step = std::max<int64_t>(64, reported_memory_mib_ / 10);
  if (reported_memory_mib_ >= 0 && std::llabs(mib - reported_memory_mib_) < step) return;
  // One try: the next check tries again, with what the job holds then.
  const Json body = {{"phase", "Running"}, {"memory_used_mib", mib}};
  if (api_.call("PUT", "/v1/jobs/" + job_id_ + "/status", body.dump())) reported_memory_mib_ = mib;
}

bool JobRunner::ship_logs(OutputReader& reader, bool until_end) {
  while (!detached()) {
    auto lines = reader.read(kMaxLinesPerPost);
    if (!lines) {
      spdlog::error("job output unreadable job=\"{}\" error=\"{}\"", job_id_, lines.error().to_string());
      return true;
    }
    if (lines->empty()) return true;
    Json batch = Json::array();
    size_t bytes = 0;
    for (const auto& line : *lines) {
      bytes += line.text.size() + 64;
      if (line.stream == OutputStream::kStderr && !line.text.empty()) last_stderr_ = line.text;
      batch.push_back({{"seq", shipped_seq(line.seq)},
                       {"stream", std::string(to_string(line.stream))},
                       {"time", format_rfc3339(std::chrono::time_point_cast<std::chrono::seconds>(line.time))},
                       {"text", line.text}});
      if (bytes > kMaxBytesPerPost) {
        // Post what is gathered; the rest of this read is re-read from the cursor next time.
        if (!post_lines(batch, batch.size())) return false;
        acked_ = line.cursor;
        save_cursor();
        batch = Json::array();
        bytes = 0;
      }
    }
    if (!batch.empty()) {
      if (!post_lines(batch, batch.size())) return false;
      acked_ = lines->back().cursor;
      save_cursor();
    }
    if (!until_end && lines->size() < kMaxLinesPerPost) return true;
  }
  return true;
}

bool JobRunner::post_lines(const Json& lines, size_t count) {
  std::string body = Json{{"lines", lines}}.dump(-1, ' ', false, Json::error_handler_t::replace);
  auto backoff = 100ms;
  while (!detached()) {
    auto posted = api_.call("POST", "/v1/jobs/" + job_id_ + "/logs", body);
    if (posted) {
      if (context_.counters) context_.counters->log_lines_shipped += count;
      return true;
    }
    if (is_gone(posted.error())) return false;
    if (posted.error().code == ErrorCode::kTooLarge) {
      spdlog::warn("job log over its limit job=\"{}\" error=\"{}\"", job_id_, posted.error().to_string());
      return true;  // drop: the server keeps no more of this job's log
    }
    spdlog::warn("log shipping retries job=\"{}\" error=\"{}\"", job_id_, posted.error().to_string());
    pause(backoff);
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, 5s);
  }
  return false;
}

void JobRunner::note(const std::string& text) {
  if (notes_after_record_ != acked_.seq) notes_after_ = 0;
  notes_after_record_ = acked_.seq;
  if (notes_after_ + 1 >= kNoteSlots) {
    spdlog::warn("job note not shipped job=\"{}\" text=\"{}\": {} notes since its last output line", job_id_, text,
                 notes_after_);
    return;
  }
  const uint64_t seq = shipped_seq(acked_.seq) + ++notes_after_;
  Json lines = Json::array({{{"seq", seq}, {"stream", "stderr"}, {"time", now_text()}, {"text", "cnlab: " + text}}});
  (void)post_lines(lines, 1);
}

void JobRunner::upload_artifacts() {
  fs::path dir = dir_ / "artifacts";
  auto set = collect_artifacts(dir.string());
  if (!set) {
    if (set.error().code != ErrorCode::kNotFound) note("artifacts not collected: " + set.error().to_string());
    return;
  }
  for (const auto& skipped : set->skipped) note("artifact " + skipped.path + " not uploaded: " + skipped.reason);
  if (set->skipped_count > static_cast<int64_t>(set->skipped.size())) {
    note(fmt::format("{} more artifacts not uploaded", set->skipped_count - static_cast<int64_t>(set->skipped.size())));
  }
  for (const auto& artifact : set->files) {
    auto fd = open_artifact(dir.string(), artifact.path);
    if (!fd) {
      note("artifact " + artifact.path + " not uploaded: " + fd.error().to_string());
      continue;
    }
    auto content = read_fd(fd->get());
    if (!content) {
      note("artifact " + artifact.path + " not uploaded: " + content.error().message);
      continue;
    }
    std::string target = "/v1/jobs/" + job_id_ + "/artifacts/" + encode_path(artifact.path);
    for (int attempt = 0; attempt < 5 && !detached(); ++attempt) {
      auto put = api_.call("PUT", target, *content, {{"Content-Type", "application/octet-stream"}});
      if (put) {
        if (context_.counters) ++context_.counters->artifacts_uploaded;
        break;
      }
      if (put.error().code != ErrorCode::kUnavailable) {
        note("artifact " + artifact.path + " not uploaded: " + put.error().message);
        break;
      }
      pause(std::chrono::milliseconds(200 << attempt));
    }
  }
}

JobRunner::PackedCheckpoint::~PackedCheckpoint() {
  std::error_code ec;
  if (!archive_.empty()) fs::remove(archive_, ec);
}

Result<JobRunner::PackedCheckpoint> JobRunner::pack_checkpoint(const fs::path& source, int64_t max_archive_bytes,
                                                               int compression_level) {
  fs::path archive = dir_ / "checkpoint.tar.gz";
  PackOptions options;
  options.output_path = archive.string();
  options.workspace_rules = false;  // a checkpoint is every file the job saved
  // A process dump is as big as the job's memory: only the receiver's limit on the archive holds.
  options.max_content_bytes = std::numeric_limits<int64_t>::max();
  options.max_archive_bytes = max_archive_bytes;
  options.compression_level = compression_level;
  auto packed = pack_workspace(source.string(), options);
  if (!packed) return packed.error();
  for (const auto& skipped : packed->skipped) {
    spdlog::warn("job checkpoint path left out job=\"{}\" path=\"{}\" reason=\"{}\"", job_id_, skipped.path,
                 skipped.reason);
  }
  return PackedCheckpoint(archive, std::move(*packed));
}

std::string JobRunner::upload_checkpoint(const fs::path& source, const std::string& taken_at, const std::string& kind) {
  // Kept on the server, several per job: compressed, at gzip's fastest level (4x the speed of its
  // default on memory pages, for a third more bytes); the server enforces its own size limit.
  auto packed = pack_checkpoint(source, std::numeric_limits<int64_t>::max(), 1);
  if (!packed) {
    spdlog::warn("job checkpoint not uploaded job=\"{}\" error=\"{}\"", job_id_, packed.error().to_string());
    return "";
  }
  std::map<std::string, std::string> headers = {{"Content-Type", "application/octet-stream"},
                                                {"Checkpoint-Digest", packed->digest()},
                                                {"Checkpoint-Taken-At", taken_at}};
  headers.merge(checkpoint_headers(source, kind));
  for (int attempt = 0; attempt < 5 && !detached(); ++attempt) {
    auto put = api_.upload("PUT", "/v1/jobs/" + job_id_ + "/checkpoint", packed->archive().string(), headers);
    if (put) {
      spdlog::info("job checkpoint uploaded job=\"{}\" digest=\"{}\" bytes={} files={}", job_id_, packed->digest(),
                   packed->archive_bytes(), packed->file_count());
      return packed->digest();
    }
    if (put.error().code != ErrorCode::kUnavailable) {
      spdlog::warn("job checkpoint not uploaded job=\"{}\" digest=\"{}\" error=\"{}\"", job_id_, packed->digest(),
                   put.error().to_string());
      return "";
    }
    pause(std::chrono::milliseconds(200 << attempt));
  }
  spdlog::warn("job checkpoint not uploaded job=\"{}\" digest=\"{}\" error=\"server unavailable\"", job_id_,
               packed->digest());
  return "";
}

Status JobRunner::download_checkpoint(const model::CheckpointRef& ref, const fs::path& checkpoint) {
  std::string target = "/v1/jobs/" + job_id_ + "/checkpoint?digest=" + ref.digest.substr(model::kDigestPrefix.size());
  const fs::path archive = dir_ / "checkpoint.download";  // written as it arrives, never held in memory
  Result<net::ClientResponse> response = Error::of(ErrorCode::kUnavailable, "", "", "not asked");
  for (int attempt = 0; attempt < 3 && !detached(); ++attempt) {
    response = api_.download(target, archive.string());
    if (response || response.error().code != ErrorCode::kUnavailable) break;
    pause(std::chrono::milliseconds(200 << attempt));
  }
  if (!response) return response.error();
  if (response->status != 200) return net::error_from_response(response->status, response->body, "GET checkpoint");
  UnpackLimits limits;
  limits.max_content_bytes = free_disk_bytes(dir_);  // a process checkpoint is as big as the job's memory
  auto unpacked = unpack_workspace(archive.string(), ref.digest, checkpoint.string(), limits);
  std::error_code ec;
  fs::remove(archive, ec);
  if (!unpacked) return unpacked.error();
  return Status::ok();
}

bool JobRunner::restore_checkpoint(const model::Job& job, const fs::path& checkpoint) {
  std::error_code ec;
  fs::path kept = context_.checkpoints_dir / dir_.filename();
  fs::path kept_meta = context_.checkpoints_dir / (dir_.filename().string() + ".json");
  bool have_kept = !context_.checkpoints_dir.empty() && fs::is_directory(kept, ec);
  std::string kept_digest, kept_kind = "files";
  std::optional<Time> kept_taken_at;
  if (have_kept) {
    std::ifstream in(kept_meta);
    Json meta = Json::parse(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()), nullptr,
                            false);
    if (meta.is_object()) {
      kept_digest = meta.value("digest", "");
      kept_kind = meta.value("kind", "files");
      if (auto taken = parse_rfc3339(meta.value("taken_at", ""), "taken_at")) kept_taken_at = *taken;
    }
  }
  // A process checkpoint goes to dir_/process, where the job cannot reach; what the job saved
  // itself, to its CNLAB_CHECKPOINT_DIR.
  auto place_of = [&](const std::string& kind) { return kind == "process" ? dir_ / "process" : checkpoint; };
  // The copy it saved when it was last taken off this node.
  auto use_kept = [&]() {
    fs::rename(kept, place_of(kept_kind), ec);
    fs::remove(kept_meta, ec);
    restored_kind_ = kept_kind;
    return fs::is_directory(place_of(kept_kind), ec);
  };
  const std::optional<model::CheckpointRef>& named = job.status.checkpoint;
  if (!named) {
    if (!have_kept) return false;
    start_note_ = "resumed from the checkpoint kept on " + context_.node;
    return use_kept();
  }
  if (have_kept && (kept_digest == named->digest || (kept_taken_at && *kept_taken_at > named->taken_at))) {
    start_note_ = kept_digest == named->digest
                      ? "resumed from checkpoint " + named->digest + " (kept on " + context_.node + ")"
                      : "resumed from the checkpoint kept on " + context_.node + " (newer than " + named->digest + ")";
    return use_kept();
  }
  if (auto fetched = download_checkpoint(*named, place_of(named->kind)); !fetched) {
    spdlog::warn("job checkpoint not restored job=\"{}\" digest=\"{}\" error=\"{}\"", job_id_, named->digest,
                 fetched.error().to_string());
    std::string why = "checkpoint " + named->digest + " not restored: " + fetched.error().message;
    if (have_kept) {
      start_note_ = why + "; resumed from the older one kept on " + context_.node;
      return use_kept();
    }
    start_note_ = why + "; started without it";
    return false;
  }
  spdlog::info("job checkpoint restored job=\"{}\" digest=\"{}\" bytes={} kind={}", job_id_, named->digest,
               named->size_bytes, named->kind);
  restored_kind_ = named->kind;
  if (have_kept) {
    (void)safe_remove_tree(kept.string());  // older than the one restored
    fs::remove(kept_meta, ec);
  }
  start_note_ = "resumed from checkpoint " + named->digest;
  return true;
}

void JobRunner::report_released(const std::string& digest, const std::string& why) {
  Json body = Json::object();
  if (!digest.empty()) body["checkpoint"] = digest;
  if (!why.empty()) body["message"] = truncate(why);
  auto backoff = 100ms;
  std::mt19937 jitter(std::random_device{}());
  while (!detached()) {
    auto answer = api_.call("POST", "/v1/jobs/" + job_id_ + "/release", body.dump());
    if (answer) {
      spdlog::info("job released job=\"{}\" checkpoint=\"{}\"", job_id_, digest);
      return;
    }
    if (is_gone(answer.error()) || answer.error().code == ErrorCode::kInvalidArgument) {
      spdlog::info("job release not taken job=\"{}\" error=\"{}\"", job_id_, answer.error().to_string());
      return;
    }
    pause(backoff + std::chrono::milliseconds(jitter() % 100));
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, 5s);
  }
}

bool JobRunner::report(const std::string& phase, std::optional<int> exit_code, std::optional<int> signal,
                       const std::string& message, bool requeue) {
  Json body = {{"phase", phase}};
  if (requeue) body["requeue"] = true;
  if (exit_code) body["exit_code"] = *exit_code;
  if (signal) body["signal"] = *signal;
  if (!message.empty()) body["message"] = message;
  auto backoff = 100ms;
  std::mt19937 jitter(std::random_device{}());
  while (!detached()) {
    auto answer = api_.call("PUT", "/v1/jobs/" + job_id_ + "/status", body.dump());
    if (answer) return true;
    // 409 is also a server that lost its compare-and-swaps to a busy node ("retry"): only a job
    // that is no longer active here is gone.
    bool gone = is_gone(answer.error()) && !(answer.error().code == ErrorCode::kConflict && still_here());
    if (gone || answer.error().code == ErrorCode::kInvalidArgument) {
      spdlog::info("job status not taken job=\"{}\" phase={} error=\"{}\"", job_id_, phase, answer.error().to_string());
      return false;
    }
    pause(backoff + std::chrono::milliseconds(jitter() % 100));
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, 5s);
  }
  return false;
}

void JobRunner::finish(const JobStatus& status) {
  running_ = false;
  if (stopper_.joinable()) stopper_.join();
  StopReason reason;
  int64_t memory_mib;
  {
    std::lock_guard lock(mutex_);
    reason = stop_reason_;
    memory_mib = job_.spec.memory_mib;
  }
  spdlog::info("job ended job=\"{}\" state={} exit_code={} signal={} oom_killed={} stop={}", job_id_,
               to_string(status.state), status.exit_code.value_or(-1), status.signal.value_or(0), status.oom_killed,
               stop_reason_name(reason));
  if (reason != StopReason::kGone) {
    upload_artifacts();
    std::string phase = "Failed", message;
    bool run_lost = false;
    if (status.state == JobState::kLost) {
      message = "the job's supervisor on " + context_.node + " died: " + status.error;
    } else if (status.oom_killed) {
      message = fmt::format("OOMKilled: the job used more than its memory limit of {} MiB", memory_mib);
    } else if (status.exit_code == 0) {
      phase = "Succeeded";
    } else if (status.exit_code) {
      message = last_stderr_.empty() ? fmt::format("exit code {}", *status.exit_code) : last_stderr_;
    } else if (status.signal) {
      const bool stopped = status.stopped || reason == StopReason::kCancelled || reason == StopReason::kShutdown;
      message = stopped ? fmt::format("stopped (signal {})", *status.signal)
                        : fmt::format("killed by signal {}", *status.signal);
      if (reason == StopReason::kShutdown) message += ": the agent of " + context_.node + " stopped it as it stopped itself";
      if (std::string lost = stopped ? "" : pages_not_pulled(); !lost.empty()) {
        // Its memory was lost with the source, not by the job's fault: it goes back to the queue
        // and resumes from its latest stored checkpoint, as from a lost node.
        message += "; its memory did not all arrive from the node it was live-migrated from (post-copy): " + lost;
        run_lost = true;
      }
    } else if (!status.error.empty()) {
      message = status.error;
    }
    if (!detached()) {
      report(phase, status.exit_code, status.signal, truncate(message), run_lost);
    }
    if (run_lost) {
      std::lock_guard lock(mutex_);
      requeued_ = true;
    }
  }
  if (detached()) return;  // the next agent finishes the job's bookkeeping
  std::error_code ec;
  fs::path kept = context_.checkpoints_dir / dir_.filename();
  fs::path kept_meta = context_.checkpoints_dir / (dir_.filename().string() + ".json");
  // Taken off this node: the server starts it again once it knows it stopped here, and with what.
  const bool release = reason == StopReason::kGone && checkpointable() && !migrated_away_;
  std::string digest, no_checkpoint = stale_copy() ? "the server took it off this node while no agent watched it; "
                                                     "the copy here was stopped without a checkpoint"
                                                   : "it saved nothing to resume from";
  if (!context_.checkpoints_dir.empty()) {
    const bool process = process_dumped_ && fs::is_directory(dir_ / "process", ec);
    const fs::path saved = process ? dir_ / "process" : dir_ / "checkpoint";
    if (release && !stale_copy() && !fs::is_empty(saved, ec)) {
      // Uploaded first, so that the job can resume on any node; kept here too, for a start here.
      std::string taken_at = now_text();
      const std::string kind = process ? "process" : "files";
      digest = upload_checkpoint(saved, taken_at, kind);
      if (digest.empty()) no_checkpoint = "its " + kind + " checkpoint could not be uploaded; it is kept on " + context_.node;
      fs::create_directories(context_.checkpoints_dir, ec);
      (void)safe_remove_tree(kept.string());
      fs::remove(kept_meta, ec);
      fs::rename(saved, kept, ec);
      if (!ec) {
        std::ofstream(kept_meta, std::ios::trunc) << Json{{"digest", digest}, {"taken_at", taken_at}, {"kind", kind}}.dump();
      }
      spdlog::info("job checkpoint kept job=\"{}\" dir=\"{}\" uploaded={} error=\"{}\"", job_id_, kept.string(),
                   !digest.empty(), ec.message());
    } else if (reason != StopReason::kGone && fs::exists(kept, ec)) {
      (void)safe_remove_tree(kept.string());  // it ended: nothing to resume
      fs::remove(kept_meta, ec);
    }
  }
  if (release) report_released(digest, digest.empty() ? no_checkpoint : "");
  if (context_.vgpu) context_.vgpu->remove_job(job_id_);
  if (auto removed = safe_remove_tree(dir_.string()); !removed) {
    spdlog::warn("job directory not removed job=\"{}\" error=\"{}\"", job_id_, removed.error().to_string());
  }
  if (context_.counters) ++context_.counters->jobs_finished;
  finished_ = true;
}

}  // namespace cnlab::agent
