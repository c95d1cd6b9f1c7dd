// JobRunner's transparent (process) checkpoints: taking one, on request and for a migration, and
// putting one back in place before a restore. See job_runner.h for the layout of dir_/process.
#include <signal.h>
#include <sys/stat.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <optional>
#include <thread>

#include "agent/files/files.h"
#include "agent/job_env.h"
#include "agent/job_runner.h"
#include "agent/migration_progress.h"
#include "agent/page_tunnel.h"
#include "agent/peer_endpoint.h"
#include "agent/vgpu_node.h"
#include "common/time.h"

namespace cnlab::agent {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr const char* kProcessMeta = "process.json";
constexpr const char* kVgpuTenantFile = "vgpu-tenant";  // the job's tenant region, as its dump left it
// The job's directories a process checkpoint carries (what its open files and working directory
// refer to); run/ is the runtime's own.
constexpr const char* kCarried[] = {"work", "artifacts", "checkpoint"};
constexpr auto kMigrationOutcomeWait = 15min;  // beyond the server's --migration-timeout
constexpr auto kPagesServedWait = 30min;       // for a post-copy target to pull every page
// A job's own save is taken as done once its CNLAB_CHECKPOINT_DIR has been still this long.
constexpr auto kSaveQuiet = std::chrono::milliseconds(1s);

std::string now_text() {
  return format_rfc3339(std::chrono::time_point_cast<std::chrono::seconds>(std::chrono::system_clock::now()));
}

int64_t epoch_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Status copy_tree(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::copy_symlinks, ec);
  if (ec) return Error::internal("copy " + from.string() + " to " + to.string() + ": " + ec.message());
  return {};
}

// How many processes a dump holds with their GPU state suspended; -1 (some, perhaps) for a dump
// from before the count was kept that holds GPUs.
int64_t suspended_cuda_processes(const Json& meta) {
  const Json& cuda = meta.contains("cuda_processes") ? meta["cuda_processes"] : Json();
  if (cuda.is_number_integer()) return std::max<int64_t>(cuda.get<int64_t>(), 0);
  const bool held_gpus = meta.contains("gpus") && meta["gpus"].is_array() && !meta["gpus"].empty();
  return held_gpus ? -1 : 0;
}

}  // namespace

std::map<std::string, std::string> JobRunner::checkpoint_headers(const fs::path& source, const std::string& kind) {
  std::map<std::string, std::string> headers = {{"Checkpoint-Kind", kind}};
  if (kind != "process") return headers;
  // The server tells by it which nodes can resume the dump (those with cuda-checkpoint, if any).
  std::ifstream in(source / kProcessMeta);
  Json meta = Json::parse(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()), nullptr, false);
  const int64_t suspended = meta.is_object() ? suspended_cuda_processes(meta) : -1;
  if (suspended >= 0) headers["Checkpoint-Cuda-Processes"] = std::to_string(suspended);
  return headers;
}

std::string JobRunner::transparent_refusal() const {
  const RuntimeCapabilities& caps = context_.runtime->capabilities();
  if (!caps.checkpoint) return caps.checkpoint_reason;
  if (!handle_ || !handle_->isolation().namespaces) return "the job has no PID namespace of its own";
  if (handle_->isolation().switch_user && !caps.checkpoint_other_users) {
    return "the job runs as another user and this agent lacks CAP_SYS_RESOURCE, which CRIU needs to dump it";
  }
  if (!binding().gpus.empty()) {
    if (!caps.gpu_checkpoint) return "the job holds GPUs, whose state only NVIDIA's cuda-checkpoint saves: " + caps.gpu_checkpoint_reason;
  }
  return "";
}

Result<JobHandle::Checkpoint> JobRunner::take_process_checkpoint(JobHandle::AfterDump after,
                                                                 std::unique_ptr<JobHandle::LazyDump>* lazy) {
  const fs::path process = dir_ / "process";
  (void)safe_remove_tree(process.string());
  std::error_code ec;
  fs::create_directories(process / "tree", ec);
  if (ec) return Error::internal("mkdir " + (process / "tree").string() + ": " + ec.message());
  ::chmod(process.c_str(), 0700);
  // With libcnlab-vgpu.so attached, what its processes hold on their GPUs is counted in the job's
  // tenant region, a file of this node's, which travels beside the images. It is copied while the
  // processes are stopped after their dump (so it says what the dump holds): a dump that would end
  // them leaves them stopped, and they are killed once it is copied.
  const bool vgpu_attached = context_.vgpu && handle_->maps_file_under(context_.vgpu->dir());
  const JobHandle::AfterDump dump_after =
      vgpu_attached && after == JobHandle::AfterDump::kStop ? JobHandle::AfterDump::kLeaveStopped : after;
  auto taken = [&]() -> Result<JobHandle::Checkpoint> {
    if (!lazy) return handle_->checkpoint(process / "images", dump_after);
    // CRIU's page server stays on loopback: the page gate (page_tunnel.h) is what others reach.
    auto port = free_tcp_port("127.0.0.1");
    if (!port) return port.error();
    auto dump = handle_->checkpoint_lazy(process / "images", "127.0.0.1", *port);
    if (!dump) return dump.error();
    *lazy = std::move(*dump);
    return (*lazy)->taken();
  }();
  if (!taken) {
    (void)safe_remove_tree(process.string());
    return taken.error();
  }
  if (vgpu_attached) {
    if (Status saved = context_.vgpu->save_tenant(job_id_, process / kVgpuTenantFile); !saved) {
      (void)safe_remove_tree(process.string());
      if (lazy) lazy->reset();
      if (dump_after == JobHandle::AfterDump::kLeaveStopped) (void)handle_->thaw();  // runs on, as after a failed dump
      return saved.error();
    }
    if (dump_after != after) (void)handle_->stop(std::chrono::milliseconds(0));
  }
  // The job is gone or stopped: its files are as its memory left them.
  for (const char* name : kCarried) {
    if (!fs::exists(dir_ / name, ec)) continue;
    if (auto copied = copy_tree(dir_ / name, process / "tree" / name); !copied) {
      (void)safe_remove_tree(process.string());
      if (lazy) lazy->reset();  // stops serving its pages
      if (after == JobHandle::AfterDump::kLeaveStopped) (void)handle_->thaw();  // not left frozen
      return copied.error();
    }
  }
  // The GPUs its CUDA processes were suspended from, for a restore onto others (cuda-checkpoint's device map).
  Json meta{{"job_dir", dir_.string()}, {"node", context_.node}, {"pause_ms", taken->pause.count()},
            {"gpus", gpu_uuids(binding(), context_.gpus->gpus())}, {"cuda_processes", taken->cuda_processes}};
  // Where the library and the job's regions were: a restore maps them where this node keeps its own.
  if (vgpu_attached) meta["vgpu"] = {{"dir", context_.vgpu->dir().string()}, {"library", context_.vgpu->library().string()}};
  std::ofstream(process / kProcessMeta, std::ios::trunc) << meta.dump();
  return taken;
}

void JobRunner::checkpoint_on_request() {
  if (std::string why = transparent_refusal(); !why.empty()) {
    const std::string asked = "checkpoint requested; no transparent one here (" + why + "): ";
    // What the directory holds before the signal, so that only the save it asks for counts.
    SaveWatch watch(dir_ / "checkpoint", context_.checkpoint_grace, kSaveQuiet, std::chrono::steady_clock::now());
    if (auto sent = handle_->send_checkpoint_signal(); !sent) {
      return checkpoint_not_taken("no transparent one here (" + why + "), and " + sent.error().message);
    }
    note(asked + "SIGUSR1 sent, for the job to save its state into CNLAB_CHECKPOINT_DIR");
    save_watch_ = std::move(watch);
    return;
  }
  const std::string taken_at = now_text();
  auto taken = take_process_checkpoint(JobHandle::AfterDump::kLeaveStopped);
  if (taken) (void)handle_->thaw();
  if (!taken) return checkpoint_not_taken(taken.error().message);
  std::string digest = upload_checkpoint(dir_ / "process", taken_at, "process");
  spdlog::info("job periodic checkpoint job=\"{}\" digest=\"{}\" pause_ms={} bytes={}", job_id_, digest,
               taken->pause.count(), taken->bytes);
  (void)safe_remove_tree((dir_ / "process").string());
  if (digest.empty()) checkpoint_not_taken("it was dumped, but not uploaded (the agent's log says why)");
}

void JobRunner::checkpoint_not_taken(const std::string& why) {
  note("checkpoint not taken: " + why);
  Json body = {{"phase", "Running"}, {"checkpoint_failed", why.substr(0, 1000)}};  // the server's limit
  if (auto told = api_.call("PUT", "/v1/jobs/" + job_id_ + "/status", body.dump()); !told) {
    spdlog::warn("job checkpoint failure not reported job=\"{}\" error=\"{}\"", job_id_, told.error().to_string());
  }
}

void JobRunner::upload_when_saved() {
  const SaveWatch::State state = save_watch_->poll(std::chrono::steady_clock::now());
  if (state == SaveWatch::State::kWaiting) return;
  const fs::path saved = save_watch_->dir();
  save_watch_.reset();
  std::error_code ec;
  if (state == SaveWatch::State::kNothingSaved || fs::is_empty(saved, ec)) {
    return checkpoint_not_taken(
        fmt::format("the job saved nothing into CNLAB_CHECKPOINT_DIR within {} of SIGUSR1 (the agent's --checkpoint-grace)",
                    format_duration(std::chrono::duration_cast<Duration>(context_.checkpoint_grace))));
  }
  const std::string digest = upload_checkpoint(saved, now_text(), "files");
  if (digest.empty()) return checkpoint_not_taken("saved by the job, but not uploaded (the agent's log says why)");
  note("checkpoint saved by the job and uploaded: " + digest);
}

Result<HostPort> JobRunner::peer_endpoint_of(const std::string& node) {
  auto answer = api_.call("GET", "/v1/nodes/" + node);
  if (!answer) return answer.error();
  const std::string address = (*answer)["status"].value("peer_address", "");
  if (address.empty()) {
    return Error::failed_precondition("node " + node +
                                      " takes no live migrations (its agent has no peer endpoint: no CRIU or no node "
                                      "certificate there)");
  }
  return parse_host_port(address, "status.peer_address");
}

bool JobRunner::handed_over_already(const std::string& digest) {
  auto job = api_.call("GET", "/v1/jobs/" + job_id_);
  if (!job) return job.error().code == ErrorCode::kNotFound;  // bound to the target: no longer ours
  auto decoded = model::job_from_json(*job);
  return decoded && decoded->status.migration && decoded->status.migration->from == context_.node &&
         decoded->status.migration->dump_digest == digest;
}

void JobRunner::migrate_out(OutputReader* reader, const model::Migration& move) {
  auto give_up = [&](const std::string& why) {
    spdlog::warn("job migration failed job=\"{}\" error=\"{}\"", job_id_, why);
    Json body = {{"phase", "Running"}, {"migration_failed", why}};
    (void)api_.call("PUT", "/v1/jobs/" + job_id_ + "/status", body.dump());
  };
  std::unique_ptr<JobHandle::LazyDump> lazy;
  // Until the hand-over the server hears that this node is still at it, however long that takes.
  std::optional<MigrationProgress> progress;
  // Dumped but not handed over: it runs on here.
  auto keep_here = [&] {
    progress.reset();
    (void)safe_remove_tree((dir_ / "process").string());
    lazy.reset();
    (void)handle_->thaw();
    migrating_out_ = false;
  };
  auto abandon = [&](const std::string& why) {
    keep_here();
    give_up(why);
  };
  // The job is no longer this node's (the target runs it, or it was taken off meanwhile): the frozen
  // copy is stopped at once, without a checkpoint, and never runs again.
  auto let_go = [&] {
    migrated_away_ = true;
    migrating_out_ = false;
    request_stop(StopReason::kGone);
  };
  // Whether the server still waits for this move. It gives a move up when this node says nothing
  // of it past --migration-timeout (the server restarted, or did not hear the progress), and takes
  // a job off a node; the node's watch shows the first, a refused word of progress either.
  enum class Move { kOn, kRolledBack, kTakenOff };
  auto move_now = [&]() -> Move {
    bool cleared;
    {
      std::lock_guard lock(mutex_);
      cleared = !job_.status.migration || job_.status.migration->requested_at != move.requested_at;
    }
    if (!cleared && !progress->refused()) return Move::kOn;
    auto job = api_.call("GET", "/v1/jobs/" + job_id_);
    if (!job) return job.error().code == ErrorCode::kNotFound ? Move::kTakenOff : Move::kOn;  // unsure: the hand-over decides
    auto decoded = model::job_from_json(*job);
    if (!decoded || (decoded->status.migration && decoded->status.migration->requested_at == move.requested_at)) {
      return Move::kOn;
    }
    const bool here = model::bound_to(*decoded, context_.node);
    return here && decoded->status.phase == model::JobPhase::kRunning ? Move::kRolledBack : Move::kTakenOff;
  };
  // Given up meanwhile: nothing more is sent. Rolled back, the job runs on here; taken off the
  // node, its frozen copy is stale and is stopped, as at a hand-over the server no longer takes.
  auto drop = [&](Move now) {
    spdlog::warn("job migration dropped job=\"{}\": the server no longer waits for it ({}); nothing more is sent", job_id_,
                 now == Move::kRolledBack ? "given up, the job runs on here" : "the job was taken off this node");
    if (now == Move::kRolledBack) return keep_here();
    progress.reset();
    (void)safe_remove_tree((dir_ / "process").string());
    (void)handle_->signal(SIGKILL);
    lazy.reset();
    let_go();
  };
  if (std::string why = transparent_refusal(); !why.empty()) return give_up(why);
  if (!context_.node_tls) return give_up("this node has no node certificate, which live migrations need");
  const NodeTls& tls = *context_.node_tls;
  auto target = peer_endpoint_of(move.to);
  if (!target) return give_up(target.error().message);
  migrating_out_ = true;
  progress.emplace(context_.server, context_.token(), job_id_, context_.migration_progress_every);
  progress->stage("dumping");
  const int64_t frozen_at = epoch_ms();
  // Post-copy where the agent offers it: the memory stays here, served to the target as it runs.
  auto taken = take_process_checkpoint(JobHandle::AfterDump::kLeaveStopped,
                                       context_.page_server_address.empty() ? nullptr : &lazy);
  if (!taken && !context_.page_server_address.empty()) {
    spdlog::warn("job post-copy dump failed job=\"{}\" error=\"{}\"; stop-and-copy instead", job_id_,
                 taken.error().to_string());
    taken = take_process_checkpoint(JobHandle::AfterDump::kLeaveStopped);
  }
  if (!taken) {
    progress.reset();
    migrating_out_ = false;
    return give_up("the dump failed: " + taken.error().message);
  }
  // Cancelled meanwhile: nothing more is sent (a large dump takes a minute to), and the job, thawed,
  // is stopped here as any cancelled job is.
  const std::string cancelled_meanwhile = "the job was cancelled meanwhile";
  if (cancelling()) return abandon(cancelled_meanwhile);
  if (Move now = move_now(); now != Move::kOn) return drop(now);
  // What it printed before the freeze goes into its log before anything the target prints: shipped
  // while the dump goes out (the pause counts both), done before the hand-over. The output the
  // shim had yet to write reaches the reader within the first 50 ms.
  std::jthread shipping_output([this, reader] {
    std::this_thread::sleep_for(50ms);
    if (reader) (void)ship_logs(*reader, false);
  });
  Json handed_over = {{"frozen_at_ms", frozen_at}};
  // The pages leave the node only through a gate that lets in the target's node certificate alone.
  std::unique_ptr<PageGate> gate;
  if (lazy) {
    auto opened = PageGate::open(context_.page_server_address, lazy->page_server().port, tls, move.to);
    if (!opened) return abandon("the post-copy page gate: " + opened.error().message);
    gate = std::move(*opened);
    handed_over["pages_from"] = format_host_port({context_.page_server_address, gate->port()});
  }
  // The memory pages go first, each file by itself, read from where CRIU wrote them; the rest
  // follows as a plain tar (gzip would spend the pause compressing memory at 50 to 150 MB/s).
  auto sender = DumpSender::connect(*target, move.to, tls);
  if (!sender) return abandon("node " + move.to + " cannot be reached: " + sender.error().message);
  const auto sending = std::chrono::steady_clock::now();
  progress->stage(fmt::format("sending {} MiB to {}", taken->bytes >> 20, move.to));
  auto parts = (*sender)->send_parts(job_id_, dir_ / "process");
  if (!parts) return abandon("node " + move.to + " did not take its dump: " + parts.error().message);
  if (cancelling()) return abandon(cancelled_meanwhile);
  if (Move now = move_now(); now != Move::kOn) return drop(now);
  const auto packing = std::chrono::steady_clock::now();
  auto packed = pack_checkpoint(dir_ / "process", kMaxMigrationDumpBytes, 0);
  (void)safe_remove_tree((dir_ / "process").string());
  if (!packed) return abandon("its dump could not be packed: " + packed.error().message);
  const auto sending_rest = std::chrono::steady_clock::now();
  if (auto sent = (*sender)->send_archive(job_id_, packed->archive(), packed->digest()); !sent) {
    return abandon("node " + move.to + " did not take its dump: " + sent.error().message);
  }
  const auto ms_since = [](std::chrono::steady_clock::time_point from, std::chrono::steady_clock::time_point to) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(to - from).count();
  };
  spdlog::info("migration dump sent job=\"{}\" to=\"{}\" part_bytes={} parts_ms={} bytes={} pack_ms={} send_ms={}",
               job_id_, move.to, *parts, ms_since(sending, packing), packed->archive_bytes(),
               ms_since(packing, sending_rest), ms_since(sending_rest, std::chrono::steady_clock::now()));
  handed_over["dump_digest"] = packed->digest();
  shipping_output.join();
  progress.reset();  // the hand-over below is the last word
  Json body = {{"phase", "Running"}, {"migration_handed_over", handed_over}};
  Result<Json> told = Error::of(ErrorCode::kUnavailable, "", "", "not asked");
  bool unanswered_before = false;  // an earlier try's answer was lost: it may have taken effect
  for (int attempt = 0; attempt < 5 && !detached(); ++attempt) {
    told = api_.call("PUT", "/v1/jobs/" + job_id_ + "/status", body.dump());
    if (told || told.error().code != ErrorCode::kUnavailable) break;
    unanswered_before = true;
    pause(std::chrono::milliseconds(200 << attempt));
  }
  if (!told && told.error().code == ErrorCode::kNotFound && !unanswered_before) {
    // Taken off this node meanwhile (requeued while an agent restarted, or the node was lost): this
    // frozen copy is stale and must never run again. Killed before CRIU lets go of it.
    spdlog::warn("job migration dropped job=\"{}\": it is no longer bound here; its frozen copy is stopped", job_id_);
    (void)handle_->signal(SIGKILL);
    lazy.reset();
    return let_go();
  }
  // Refused, and not because an earlier try whose answer was lost took effect: it runs on here. Not
  // answered at all: the outcome below decides (the server gives a migration whose hand-over never
  // arrived back to this node after --migration-timeout), so the job never runs twice.
  if (!told && told.error().code != ErrorCode::kUnavailable &&
      (!unanswered_before || !handed_over_already(packed->digest()))) {
    return abandon("the server did not take the hand-over: " + told.error().message);
  }
  spdlog::info("job frozen for migration job=\"{}\" to=\"{}\" digest=\"{}\" dump_ms={} bytes={} post_copy={}", job_id_,
               move.to, packed->digest(), taken->pause.count(), *parts + packed->archive_bytes(), lazy != nullptr);
  // The outcome: the target runs it (the job is no longer ours to see), or it is given back.
  const auto deadline = std::chrono::steady_clock::now() + kMigrationOutcomeWait;
  while (!detached() && std::chrono::steady_clock::now() < deadline) {
    auto job = api_.call("GET", "/v1/jobs/" + job_id_);
    if (!job && job.error().code == ErrorCode::kNotFound) {
      spdlog::info("job migrated away job=\"{}\"", job_id_);
      if (lazy) {
        // The target runs it and pulls the rest of its memory: serve until it has every page, or,
        // once the agent is asked to stop, for its stop grace more (the pages leave through this
        // process's gate, which goes with it). This copy never runs again: it is killed before
        // CRIU lets go of it.
        std::optional<std::chrono::steady_clock::time_point> stopping_since;
        auto stop_serving = [&] {
          if (!detached()) return false;
          const auto now = std::chrono::steady_clock::now();
          if (!stopping_since) stopping_since = now;
          if (now - *stopping_since < context_.stop_grace) return false;
          (void)handle_->signal(SIGKILL);
          return true;
        };
        if (auto served = lazy->wait_served(kPagesServedWait, stop_serving); served) {
          spdlog::info("job pages served job=\"{}\"", job_id_);
        } else {
          spdlog::error("job pages not all served job=\"{}\" error=\"{}\"", job_id_, served.error().to_string());
        }
      }
      return let_go();
    }
    if (job) {
      auto decoded = model::job_from_json(*job);
      if (decoded && !decoded->status.migration) {
        if (model::bound_to(*decoded, context_.node)) {
          spdlog::info("job migration rolled back job=\"{}\"; thawing", job_id_);
          lazy.reset();  // no more pages for the target
          update(*decoded);
          (void)handle_->thaw();
          migrating_out_ = false;
          return;
        }
      }
    }
    pause(100ms);
  }
  // No answer for that long: thaw it rather than leave it frozen.
  lazy.reset();
  (void)handle_->thaw();
  migrating_out_ = false;
}

Result<fs::path> JobRunner::prepare_restore(const model::NodeBinding& binding,
                                            std::vector<std::pair<std::string, std::string>>* device_map) {
  const fs::path process = dir_ / "process";
  const RuntimeCapabilities& caps = context_.runtime->capabilities();
  // Where its processes cannot be restored, the job's own saved files still help it resume.
  auto cannot_restore = [&](const std::string& why) -> Error {
    std::error_code ec;
    if (fs::is_directory(process / "tree" / "checkpoint", ec)) {
      (void)safe_remove_tree((dir_ / "checkpoint").string());
      fs::rename(process / "tree" / "checkpoint", dir_ / "checkpoint", ec);
    }
    return Error::failed_precondition(why);
  };
  if (!caps.checkpoint) return cannot_restore("this node cannot restore processes: " + caps.checkpoint_reason);
  std::ifstream in(process / kProcessMeta);
  Json meta = Json::parse(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()), nullptr, false);
  if (!meta.is_object() || !meta.contains("job_dir") || !meta["job_dir"].is_string()) {
    return Error::invalid_argument(kProcessMeta, (process / kProcessMeta).string(), "not a process checkpoint's description");
  }
  const fs::path dumped_dir = meta["job_dir"].get<std::string>();
  std::vector<std::string> dumped_gpus;
  if (meta.contains("gpus") && meta["gpus"].is_array()) {
    for (const auto& uuid : meta["gpus"]) {
      if (uuid.is_string()) dumped_gpus.push_back(uuid.get<std::string>());
    }
  }
  // Processes dumped with their GPU state suspended come back suspended, and only cuda-checkpoint
  // resumes them: left so, each would block in its next CUDA call for good.
  if (suspended_cuda_processes(meta) != 0 && !caps.cuda_state) {
    return cannot_restore(
        "its processes were dumped with their GPU state suspended, which only NVIDIA's cuda-checkpoint resumes, and "
        "this node has none (" +
        (caps.gpu_checkpoint_reason.empty() ? std::string("its GPUs are simulated") : caps.gpu_checkpoint_reason) + ")");
  }
  const std::vector<std::string> here = gpu_uuids(binding, context_.gpus->gpus());
  if (!dumped_gpus.empty() && dumped_gpus.size() != here.size()) {
    return Error::failed_precondition(fmt::format("its processes were dumped holding {} GPUs and are bound to {} here",
                                                  dumped_gpus.size(), here.size()));
  }
  device_map->clear();
  for (size_t i = 0; i < dumped_gpus.size(); ++i) device_map->emplace_back(dumped_gpus[i], here[i]);
  // Dumped with libcnlab-vgpu.so attached: its regions and the library itself are mapped from where
  // this node keeps them, and the job's tenant region takes the dump's once add_job registered it.
  vgpu_tenant_to_restore_.clear();
  if (meta.contains("vgpu") && meta["vgpu"].is_object()) {
    if (!context_.vgpu) {
      return Error::failed_precondition(
          "its processes were dumped with libcnlab-vgpu.so attached, and this node runs jobs without it (--no-vgpu)");
    }
    const Json& vgpu = meta["vgpu"];
    const std::string from_dir = vgpu.value("dir", ""), from_library = vgpu.value("library", "");
    if (from_dir.empty() || from_library.empty() || !fs::exists(process / kVgpuTenantFile)) {
      return Error::invalid_argument(kProcessMeta, (process / kProcessMeta).string(),
                                     "names the vGPU library but not its regions' directory, its path or the tenant region");
    }
    for (const auto& [from, to] : {std::pair<fs::path, fs::path>{from_dir, context_.vgpu->dir()},
                                   std::pair<fs::path, fs::path>{from_library, context_.vgpu->library()}}) {
      if (from == to) continue;
      auto rewritten = rewrite_checkpoint_paths(process / "images", from, to);
      if (!rewritten) return rewritten.error();
    }
    vgpu_tenant_to_restore_ = process / kVgpuTenantFile;
  }
  std::error_code ec;
  for (const char* name : kCarried) {
    if (!fs::exists(process / "tree" / name, ec)) continue;
    (void)safe_remove_tree((dir_ / name).string());
    fs::rename(process / "tree" / name, dir_ / name, ec);
    if (ec) return Error::internal("cannot put " + std::string(name) + " back in place: " + ec.message());
  }
  if (dumped_dir != dir_) {
    auto rewritten = rewrite_checkpoint_paths(process / "images", dumped_dir, dir_);
    if (!rewritten) return rewritten.error();
  }
  const std::string from = meta.value("node", "");
  start_note_ += from.empty() || from == context_.node ? "; processes restored" : "; processes restored (dumped on " + from + ")";
  return process / "images";
}

}  // namespace cnlab::agent
