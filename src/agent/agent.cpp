#include "agent/agent.h"

#include <sys/wait.h>

#include <pwd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include "agent/agent_metrics.h"
#include "agent/vgpu_control.h"
#include "agent/vgpu_node.h"
#include "agent/files/files.h"
#include "agent/gpu/gpu.h"
#include "agent/job_runner.h"
#include "agent/node_identity.h"
#include "agent/node_report.h"
#include "agent/peer_endpoint.h"
#include "agent/runtime/runtime.h"
#include "agent/server_api.h"
#include "common/strings.h"
#include "net/net.h"

#ifndef CNLAB_VERSION
#define CNLAB_VERSION "dev"
#endif

namespace cnlab::agent {
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

// The largest dump another agent may stream here (a stop-and-copy dump holds the job's memory).

Time now() { return std::chrono::time_point_cast<std::chrono::seconds>(std::chrono::system_clock::now()); }

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

// A node name from a host name: lower case, [a-z0-9.-], trimmed to 63 characters.
std::string node_name_from(std::string host) {
  std::string out;
  for (char c : host) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out.push_back(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' ? c : '-');
  }
  while (!out.empty() && !std::isalnum(static_cast<unsigned char>(out.back()))) out.pop_back();
  if (out.size() > 63) out.resize(63);
  return out.empty() ? "node" : out;
}

bool active(model::JobPhase phase) { return phase == model::JobPhase::kScheduled || phase == model::JobPhase::kRunning; }

std::pair<int64_t, double> own_usage() {
  int64_t rss = 0;
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) rss = std::stoll(line.substr(6)) * 1024;
  }
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  double cpu = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
               static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  return {rss, cpu};
}

// Whether user `uid` may read `path` (and pass every directory above it): asked of a child process
// that becomes that user, since access() answers for the caller only.
bool readable_as(const std::string& path, uint32_t uid, uint32_t gid) {
  if (::geteuid() != 0) return ::access(path.c_str(), R_OK) == 0;
  pid_t child = ::fork();
  if (child == 0) {
    if (::setgid(gid) != 0 || ::setuid(uid) != 0) ::_exit(2);
    ::_exit(::access(path.c_str(), R_OK) == 0 ? 0 : 1);
  }
  int status = 0;
  if (child < 0 || ::waitpid(child, &status, 0) != child) return true;  // cannot tell: let the jobs try
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

class AgentImpl final : public Agent {
 public:
  explicit AgentImpl(AgentConfig config) : config_(std::move(config)) {}
  ~AgentImpl() override { stop(false); }

  Status open();

  const std::string& node_name() const override { return name_; }
  std::string metrics_url() const override { return metrics_ ? metrics_->url() : ""; }

  void stop(bool stop_jobs) override {
    {
      std::lock_guard lock(mutex_);
      if (stopped_) return;
      stopped_ = true;
    }
    wake_.notify_all();
    {
      std::lock_guard lock(api_mutex_);
      if (watch_api_) watch_api_->interrupt();
      if (heartbeat_api_) heartbeat_api_->interrupt();
    }
    if (vgpu_control_) vgpu_control_->stop();
    if (watch_thread_.joinable()) watch_thread_.join();
    if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
    if (reaper_thread_.joinable()) reaper_thread_.join();
    std::map<std::string, std::shared_ptr<JobRunner>> runners;
    {
      std::lock_guard lock(mutex_);
      runners.swap(runners_);
    }
    if (stop_jobs) {
      for (auto& [id, runner] : runners) runner->request_stop(JobRunner::StopReason::kShutdown);
      auto deadline = std::chrono::steady_clock::now() + config_.stop_grace + 10s;
      for (auto& [id, runner] : runners) {
        while (!runner->finished() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
      }
    }
    for (auto& [id, runner] : runners) runner->detach();
    runners.clear();  // joins each runner's thread
    if (metrics_) metrics_->stop();
    spdlog::info("agent stopped node=\"{}\" jobs_stopped={}", name_, stop_jobs);
  }

 private:
  std::string token() const {
    std::lock_guard lock(identity_mutex_);
    return identity_.token;
  }
  void set_identity(NodeIdentity identity) {
    std::lock_guard lock(identity_mutex_);
    identity_ = std::move(identity);
  }
  model::Node report(Time now);
  Status register_or_load();
  void adopt_jobs();
  void heartbeat_loop();
  // This node's certificate and the endpoint other agents stream migrating jobs to; on failure
  // (logged) the node neither sends nor takes live migrations.
  void start_peer_endpoint();
  // Asks the server whether a dump sent here was asked for (PeerEndpoint's check).
  ExpectedMove expected_move();
  // From the heartbeat thread, every certificate_check_interval: a certificate with a third of its
  // life left (or gone) is renewed, and the peer endpoint restarted with it on the same port (gates
  // and tunnels read it when they open).
  void renew_node_certificate();
  std::chrono::steady_clock::time_point certificate_checked_at_{};
  // Brings MIG-enabled GPUs to the layouts the scheduler decided (the node record), before the
  // heartbeat reports what is there. Returns the revision of the record it read (0: unread): the
  // heartbeat names it, so that the server keeps a layout decided after it.
  int64_t apply_decided_layouts(ServerApi& api);
  void watch_loop();
  // Lists the jobs bound here and reconciles all of them; returns the list's revision.
  Result<int64_t> relist(ServerApi& api);
  void reconcile(const model::Job& job);
  void forget(const std::string& id);  // the job left this node (a watch DELETED)
  // A job still leaving this node (pre-empted, being dumped or saving itself) that `job` must wait
  // for before it starts: one holding a GPU index `job` is bound to, or any, when the node's host
  // CPU or memory cannot hold `job` beside every run still here. Empty `job` when none. Under mutex_.
  struct Holder {
    std::string job;
    std::string what;  // what it holds: "its GPUs", "host CPU and memory"
  };
  Holder leaving_holder(const model::Job& job) const;
  void reap();
  void reaper_loop();  // reaps finished runners (and starts their relaunches) as they finish
  bool pause(std::chrono::milliseconds duration) {
    std::unique_lock lock(mutex_);
    wake_.wait_for(lock, duration, [&] { return stopped_.load(); });
    return !stopped_;
  }
  std::string node_address(const std::string& node);
  // How readily a job of this node is moved off a GPU short of memory: its class's rank (the
  // opportunistic first, inference last).
  int class_rank(const std::string& job);
  net::Response serve_metrics(const net::Request& request);

  AgentConfig config_;
  std::string name_;
  std::unique_ptr<GpuBackend> gpus_;
  std::unique_ptr<MigManager> mig_;
  std::unique_ptr<Runtime> runtime_;
  std::unique_ptr<WorkspaceCache> workspaces_;
  std::unique_ptr<VgpuNode> vgpu_;
  std::unique_ptr<VgpuControl> vgpu_control_;
  RunnerCounters counters_;
  std::counting_semaphore<> start_slots_{4};
  RunnerContext context_;
  NodeReportInput report_input_;
  std::unique_ptr<net::Server> metrics_;
  std::unique_ptr<PeerEndpoint> peer_endpoint_;  // set while this node takes live migrations

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<bool> stopped_{false};
  mutable std::mutex identity_mutex_;  // apart from mutex_: runners ask for the token while it is held
  NodeIdentity identity_;
  model::Node last_report_;
  std::map<std::string, std::shared_ptr<JobRunner>> runners_;
  // Jobs whose runner finished here, until the server no longer shows them active on this node:
  // a late watch event must not start them again.
  std::set<std::string> finished_;
  std::map<std::string, model::Job> relaunch_;  // bound here again while the old run still stops
  // Bound here onto a GPU that a job taken off this node still holds while it is dumped or stopped
  // (the job pre-empted for this one): started once that one has left it (see reconcile).
  std::map<std::string, model::Job> held_back_;
  std::map<std::string, std::string> addresses_;  // node -> reported host, for MASTER_ADDR
  std::atomic<int64_t> heartbeats_ok_{0}, heartbeats_failed_{0};

  std::mutex api_mutex_;
  std::shared_ptr<ServerApi> watch_api_, heartbeat_api_;
  std::thread heartbeat_thread_, watch_thread_, reaper_thread_;
  bool reap_due_ = false;
};

model::Node AgentImpl::report(Time now) {
  std::lock_guard lock(mutex_);
  model::Node node = node_report(report_input_, *gpus_, last_report_.meta.name.empty() ? nullptr : &last_report_, now);
  last_report_ = node;
  return node;
}

Status AgentImpl::open() {
  std::error_code ec;
  if (config_.data_dir.empty()) return Error::invalid_argument("--data-dir", "", "is required");
  fs::create_directories(config_.data_dir, ec);
  if (ec) return Error::invalid_argument("--data-dir", config_.data_dir, "cannot be created: " + ec.message());
  config_.data_dir = fs::absolute(config_.data_dir).lexically_normal().string();
  // Jobs' users pass through to their own directories, nothing else of the agent's is theirs.
  ::chmod(config_.data_dir.c_str(), 0711);
  fs::path jobs_dir = fs::path(config_.data_dir) / "jobs";
  fs::create_directories(jobs_dir, ec);
  ::chmod(jobs_dir.c_str(), 0711);

  name_ = config_.node_name.empty() ? node_name_from(host_name()) : config_.node_name;
  if (auto stored = load_identity(config_.data_dir); stored) {
    if (!config_.node_name.empty() && stored->name != config_.node_name) {
      return Error::invalid_argument("--name", config_.node_name,
                                     fmt::format("this data directory belongs to node \"{}\"; use that name or "
                                                 "another --data-dir",
                                                 stored->name));
    }
    name_ = stored->name;
    identity_ = *stored;
  }

  // GPUs.
  if (!config_.simulate_gpus.empty()) {
    fs::path faults = fs::path(config_.data_dir) / "faults";
    fs::create_directories(faults, ec);
    auto simulated = SimulatedBackend::create(name_, config_.simulate_gpus, faults.string());
    if (!simulated) return simulated.error();
    gpus_ = std::move(*simulated);
    spdlog::warn("gpus are SIMULATED node=\"{}\" spec=\"{}\" fault_dir=\"{}\"", name_, config_.simulate_gpus,
                 faults.string());
  } else {
    gpus_ = NvmlBackend::open({config_.nvml_library});
  }

  mig_ = std::make_unique<MigManager>(*gpus_);

  // The runtime.
  RuntimeOptions runtime_options;
  runtime_options.shim_command = config_.shim_command;
  runtime_options.use_cgroups = config_.use_cgroups;
  runtime_options.use_namespaces = config_.use_namespaces;
  // One level per node: two agents on one machine (tests, demos) never share a job's cgroup.
  runtime_options.cgroup_parent = config_.cgroup_parent + "/" + name_;
  runtime_options.criu = config_.criu == "none" ? "" : config_.criu.empty() ? find_criu() : config_.criu;
  runtime_options.cuda_checkpoint = config_.cuda_checkpoint == "none"  ? ""
                                    : config_.cuda_checkpoint.empty() ? find_cuda_checkpoint()
                                                                      : config_.cuda_checkpoint;
  // Simulated GPUs hold no device state, so CRIU alone can dump their jobs; unless told "none",
  // which keeps such jobs on the application path (SIGUSR1), as on a real node without the tool.
  runtime_options.simulated_gpus = !config_.simulate_gpus.empty() && config_.cuda_checkpoint != "none";
  auto runtime = Runtime::create(runtime_options);
  if (!runtime) return runtime.error();
  runtime_ = std::move(*runtime);

  workspaces_ = std::make_unique<WorkspaceCache>((fs::path(config_.data_dir) / "workspaces").string(),
                                                 config_.workspace_cache_bytes);

  // Who jobs run as.
  RunAs run_as;
  std::optional<uint32_t> uid, gid;
  if (!config_.run_as.empty()) {
    struct passwd pw {};
    struct passwd* found = nullptr;
    std::vector<char> buffer(16384);
    if (::getpwnam_r(config_.run_as.c_str(), &pw, buffer.data(), buffer.size(), &found) != 0 || !found) {
      return Error::invalid_argument("--run-as", config_.run_as, "no such user on this machine");
    }
    if (!runtime_->capabilities().switch_user && found->pw_uid != ::geteuid()) {
      return Error::invalid_argument("--run-as", config_.run_as,
                                     "running jobs as another user needs the agent to run as root");
    }
    run_as.user = config_.run_as;
    uid = found->pw_uid;
    gid = found->pw_gid;
    // The job's user must pass through every directory above its own: say so now, not per job.
    for (fs::path dir = jobs_dir; !dir.empty(); dir = dir.parent_path()) {
      struct stat st {};
      if (::stat(dir.c_str(), &st) == 0 && st.st_uid != *uid && !(st.st_mode & S_IXOTH) &&
          !(st.st_gid == *gid && (st.st_mode & S_IXGRP))) {
        return Error::invalid_argument(
            "--data-dir", config_.data_dir,
            fmt::format("jobs run as \"{}\" cannot reach {}: {} has mode {:o}; use a data directory whose parents "
                        "others may traverse (chmod o+x), or another --run-as",
                        config_.run_as, jobs_dir.string(), dir.string(), st.st_mode & 07777));
      }
      if (dir == dir.root_path()) break;
    }
  }

  if (config_.use_vgpu) {
    VgpuNode::Options options;
    options.dir = fs::path(config_.data_dir) / "vgpu";
    options.library = config_.vgpu_library.empty() ? default_vgpu_library() : config_.vgpu_library;
    Result<std::unique_ptr<VgpuNode>> vgpu = Error::internal("not opened");
    if (uid && !readable_as(options.library.string(), *uid, gid.value_or(*uid))) {
      // The dynamic loader would skip it in every job process with a warning: say so once instead.
      vgpu = Error::invalid_argument("--vgpu-library", options.library.string(),
                                     fmt::format("jobs run as \"{}\" cannot read it (or a directory above it)", config_.run_as));
    } else {
      vgpu = VgpuNode::open(options);
    }
    if (!vgpu) {
      if (!config_.vgpu_library.empty()) return vgpu.error();  // asked for by name: it must work
      spdlog::warn("jobs run without libcnlab-vgpu.so (no VRAM quotas, compute shares or IPC isolation) error=\"{}\"",
                   vgpu.error().to_string());
    } else {
      vgpu_ = std::move(*vgpu);
    }
  }

  HostResources host = detect_host();
  if (config_.cpu_milli > 0) host.cpu_milli = config_.cpu_milli;
  if (config_.memory_mib > 0) host.memory_mib = config_.memory_mib;
  report_input_ = {name_, config_.labels, host, config_.address.empty() ? host_name() : config_.address,
                   CNLAB_VERSION};

  context_.node = name_;
  context_.jobs_dir = jobs_dir;
  context_.server = {config_.server, config_.ca_file};
  context_.token = [this] { return token(); };
  context_.runtime = runtime_.get();
  context_.gpus = gpus_.get();
  context_.workspaces = workspaces_.get();
  context_.run_as = run_as;
  context_.run_as_uid = uid;
  context_.run_as_gid = gid;
  context_.stop_grace = config_.stop_grace;
  context_.checkpoint_grace = config_.checkpoint_grace;
  context_.migration_progress_every = config_.migration_progress_every;
  context_.checkpoints_dir = fs::path(config_.data_dir) / "checkpoints";
  if (config_.post_copy) {
    // The page server listens where the node says it can be reached (its --address, a port of it dropped).
    auto where = parse_host_port(report_input_.address, "--address");
    const std::string host = where ? where->host : report_input_.address;
    if (!runtime_->capabilities().checkpoint) {
      spdlog::warn("post-copy off: this node takes no transparent checkpoints ({})",
                   runtime_->capabilities().checkpoint_reason);
    } else if (auto enabled = enable_post_copy(); !enabled) {
      spdlog::warn("post-copy off: {}", enabled.error().to_string());
    } else {
      context_.page_server_address = host;
      spdlog::info("post-copy migrations on node=\"{}\" page_server_address=\"{}\"", name_, host);
    }
  }
  context_.node_address = [this](const std::string& node) { return node_address(node); };
  context_.counters = &counters_;
  context_.start_slots = &start_slots_;
  context_.vgpu = vgpu_.get();
  context_.apply_layouts = [this] {
    ServerApi api(context_.server, token());
    apply_decided_layouts(api);
  };
  context_.on_finished = [this] {
    std::lock_guard lock(mutex_);
    reap_due_ = true;
    wake_.notify_all();
  };

  if (auto ok = register_or_load(); !ok) return ok;
  if (runtime_->capabilities().checkpoint) start_peer_endpoint();
  adopt_jobs();

  if (!config_.metrics_listen.empty()) {
    net::ServerOptions options;
    options.listen = config_.metrics_listen;
    options.tls = false;
    options.worker_threads = 2;
    options.io_threads = 1;
    auto server = net::Server::start(options, [this](const net::Request& r) { return serve_metrics(r); });
    if (!server) {
      Error e = server.error();
      e.field = "--metrics-listen";
      return e;
    }
    metrics_ = std::move(*server);
  }
  if (vgpu_) {
    vgpu_control_ = std::make_unique<VgpuControl>(
        *vgpu_, *gpus_, [this] { return std::make_unique<ServerApi>(context_.server, token()); },
        [this](const std::string& job) { return class_rank(job); }, VgpuControl::Options{});
    vgpu_control_->start();
  }
  heartbeat_thread_ = std::thread([this] { heartbeat_loop(); });
  reaper_thread_ = std::thread([this] { reaper_loop(); });
  watch_thread_ = std::thread([this] { watch_loop(); });
  const RuntimeCapabilities& caps = runtime_->capabilities();
  spdlog::info("agent started node=\"{}\" server=\"{}\" gpus={} backend={} cgroups={} namespaces={} run_as=\"{}\" "
               "metrics=\"{}\"",
               name_, config_.server, gpus_->gpus().size(), gpus_->kind(), to_string(caps.cgroups), caps.namespaces,
               config_.run_as, metrics_url());
  return Status::ok();
}

void AgentImpl::renew_node_certificate() {
  if (!peer_endpoint_ || std::chrono::steady_clock::now() - certificate_checked_at_ < config_.certificate_check_interval) {
    return;
  }
  certificate_checked_at_ = std::chrono::steady_clock::now();
  bool renewed = false;
  auto tls = ensure_node_certificate(context_.server, token(), config_.data_dir, name_, &renewed);
  if (!tls) {
    spdlog::warn("node certificate not renewed node=\"{}\" error=\"{}\"", name_, tls.error().to_string());
    return;
  }
  if (!renewed) return;
  const std::string listen = report_input_.peer_address;
  peer_endpoint_.reset();  // frees the port for its successor
  auto endpoint = PeerEndpoint::start(listen, *tls, context_.incoming_dir, kMaxMigrationDumpBytes, expected_move());
  if (!endpoint) {
    spdlog::error("live migrations off: the peer endpoint did not restart node=\"{}\" error=\"{}\"", name_,
                  endpoint.error().to_string());
    report_input_.peer_address.clear();  // the next heartbeat says so
    return;
  }
  peer_endpoint_ = std::move(*endpoint);
}

ExpectedMove AgentImpl::expected_move() {
  return [this](const std::string& job, const std::string& from) -> Status {
    // The server shows a node the jobs moving to it; the source is where the job is bound until
    // it hands its dump over.
    ServerApi api(context_.server, token(), std::chrono::seconds(10));
    auto seen = api.call("GET", "/v1/jobs/" + job);
    if (!seen) return seen.error();
    const Json& status = (*seen)["status"];
    const Json& move = status.value("migration", Json::object());
    const Json& placement = status.value("placement", Json::array());
    const std::string source = placement.size() == 1 ? placement[0].value("node", "") : "";
    if (move.value("to", "") != name_ || (source != from && move.value("from", "") != from)) {
      return Error::of(ErrorCode::kPermissionDenied, "job", job, "the server has no such move");
    }
    return Status::ok();
  };
}

void AgentImpl::start_peer_endpoint() {
  certificate_checked_at_ = std::chrono::steady_clock::now();
  auto tls = ensure_node_certificate(context_.server, token(), config_.data_dir, name_);
  if (!tls) {
    spdlog::warn("live migrations off: no node certificate node=\"{}\" error=\"{}\"", name_, tls.error().to_string());
    return;
  }
  auto where = parse_host_port(report_input_.address, "--address");
  const std::string host = where ? where->host : report_input_.address;
  const fs::path incoming = fs::path(config_.data_dir) / "incoming";
  auto endpoint = PeerEndpoint::start(format_host_port({host, config_.peer_port}), *tls, incoming,
                                      kMaxMigrationDumpBytes, expected_move());
  if (!endpoint) {
    spdlog::warn("live migrations off: the peer endpoint node=\"{}\" error=\"{}\"", name_, endpoint.error().to_string());
    return;
  }
  peer_endpoint_ = std::move(*endpoint);
  context_.node_tls = *tls;
  context_.incoming_dir = incoming;
  report_input_.peer_address = format_host_port({host, peer_endpoint_->port()});
  // GPU state moves with a job where the runtime suspends it (docs/checkpoint.md), with its vGPU
  // tenant region where libcnlab-vgpu.so is attached.
  report_input_.gpu_checkpoint = runtime_->capabilities().gpu_checkpoint;
  spdlog::info("live migrations on node=\"{}\" peer_address=\"{}\"", name_, report_input_.peer_address);
}

Status AgentImpl::register_or_load() {
  if (!identity_.token.empty()) return Status::ok();
  // Registration must succeed once before anything else makes sense; retry an unreachable server
  // for a while (it may be starting too), refuse a bad join token at once.
  auto backoff = 200ms;
  for (int attempt = 0;; ++attempt) {
    auto registered = register_node(context_.server, config_.join_token, report(now()), config_.data_dir);
    if (registered) {
      set_identity(*registered);
      spdlog::info("node registered node=\"{}\"", name_);
      return Status::ok();
    }
    if (registered.error().code != ErrorCode::kUnavailable || attempt >= 30) return registered.error();
    spdlog::warn("server unreachable, retrying registration error=\"{}\"", registered.error().to_string());
    std::this_thread::sleep_for(backoff);
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, 5s);
  }
}

void AgentImpl::adopt_jobs() {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(context_.jobs_dir, ec)) {
    if (!entry.is_directory()) continue;
    auto runner = JobRunner::adopt(context_, entry.path());
    if (!runner) {
      spdlog::warn("job directory not adopted dir=\"{}\" error=\"{}\"", entry.path().string(), runner.error().to_string());
      continue;
    }
    spdlog::info("job adopted job=\"{}\"", (*runner)->job_id());
    std::lock_guard lock(mutex_);
    runners_[(*runner)->job_id()] = *runner;
  }
  if (vgpu_) {
    // vGPU tenants of jobs not adopted (they ended while no agent watched) go.
    std::vector<std::string> adopted;
    std::lock_guard lock(mutex_);
    for (const auto& [id, runner] : runners_) adopted.push_back(id);
    vgpu_->retain_only(adopted);
  }
}

int AgentImpl::class_rank(const std::string& job) {
  std::string cls;
  {
    std::lock_guard lock(mutex_);
    auto it = runners_.find(job);
    if (it != runners_.end()) cls = it->second->priority_class();
  }
  if (cls == "opportunistic") return 0;
  if (cls == "dev") return 1;
  if (cls == "production") return 2;
  return 3;
}

int64_t AgentImpl::apply_decided_layouts(ServerApi& api) {
  auto record = api.call("GET", "/v1/nodes/" + name_);
  if (!record) return 0;
  auto decided = model::node_from_json(*record);
  if (!decided) return 0;
  std::vector<GpuInfo> actual = gpus_->gpus();
  for (const auto& gpu : decided->gpus) {
    if (gpu.index < 0 || gpu.index >= static_cast<int>(actual.size())) continue;
    const GpuInfo& here = actual[static_cast<size_t>(gpu.index)];
    if (!gpu.mig_enabled || !here.mig_enabled || gpu.mig_instances == here.mig_instances()) continue;
    auto applied = mig_->apply(gpu.index, gpu.mig_instances);
    if (applied) {
      spdlog::info("mig layout applied node=\"{}\" gpu={} created={} destroyed={}", name_, gpu.index,
                   applied->created.size(), applied->destroyed.size());
    } else {
      // The heartbeat that follows reports the layout as it is; the scheduler plans from that.
      spdlog::warn("mig layout not applied node=\"{}\" gpu={} error=\"{}\"", name_, gpu.index,
                   applied.error().to_string());
    }
  }
  return decided->meta.revision;
}

void AgentImpl::heartbeat_loop() {
  auto api = std::make_shared<ServerApi>(context_.server, token());
  {
    std::lock_guard lock(api_mutex_);
    heartbeat_api_ = api;
  }
  std::mt19937 jitter(std::random_device{}());
  auto interval = config_.heartbeat_interval;
  auto backoff = 200ms;
  bool healthy_link = true;
  do {
    for (const auto& event : gpus_->poll_health()) {
      spdlog::error("gpu unhealthy node=\"{}\" gpu={} uuid=\"{}\" reason=\"{}\"", name_, event.index, event.uuid,
                    event.reason);
    }
    renew_node_certificate();
    int64_t layouts_read = apply_decided_layouts(*api);
    model::Node node = report(now());
    node.meta.revision = layouts_read;
    auto answer = api->call("PUT", "/v1/nodes/" + name_ + "/heartbeat", model::to_json(node).dump());
    if (answer) {
      ++heartbeats_ok_;
      if (!healthy_link) spdlog::info("server reachable again node=\"{}\"", name_);
      healthy_link = true;
      backoff = 200ms;
      // Up to 10% jitter keeps a thousand agents restarted together from beating in step.
      if (!pause(interval - std::chrono::milliseconds(jitter() % std::max<int64_t>(1, interval.count() / 10)))) break;
      continue;
    }
    ++heartbeats_failed_;
    const Error& error = answer.error();
    if ((error.code == ErrorCode::kUnauthenticated || error.code == ErrorCode::kNotFound) && !config_.join_token.empty()) {
      // The credential was revoked or the node deleted: join again.
      spdlog::warn("node credential refused, registering again node=\"{}\" error=\"{}\"", name_, error.to_string());
      auto registered = register_node(context_.server, config_.join_token, node, config_.data_dir);
      if (registered) {
        set_identity(*registered);
        api->set_token(registered->token);
        continue;
      }
    }
    if (healthy_link) spdlog::warn("heartbeat failed node=\"{}\" error=\"{}\"", name_, error.to_string());
    healthy_link = false;
    if (!pause(backoff + std::chrono::milliseconds(jitter() % 250))) break;
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, 10s);
  } while (true);
}

Result<int64_t> AgentImpl::relist(ServerApi& api) {
  auto listed = api.call("GET", "/v1/jobs");
  if (!listed) return listed.error();
  std::set<std::string> here;
  for (const auto& item : (*listed)["items"]) {
    auto job = model::job_from_json(item);
    if (!job) {
      spdlog::warn("job not understood error=\"{}\"", job.error().to_string());
      continue;
    }
    here.insert(job->meta.name);
    reconcile(*job);
  }
  // Local jobs the server no longer has on this node were taken away while the agent was gone.
  std::vector<std::string> gone;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [id, runner] : runners_) {
      if (!here.count(id)) gone.push_back(id);
    }
    for (auto it = finished_.begin(); it != finished_.end();) {
      it = here.count(*it) ? std::next(it) : finished_.erase(it);
    }
    for (auto it = held_back_.begin(); it != held_back_.end();) {
      it = here.count(it->first) ? std::next(it) : held_back_.erase(it);
    }
  }
  for (const auto& id : gone) forget(id);
  return (*listed)["revision"].get<int64_t>();
}

void AgentImpl::reconcile(const model::Job& job) {
  const std::string& id = job.meta.name;
  bool mine = model::bound_to(job, name_) && active(job.status.phase);
  std::lock_guard lock(mutex_);
  if (stopped_) return;
  auto it = runners_.find(id);
  if (!mine) {
    finished_.erase(id);
    relaunch_.erase(id);
    held_back_.erase(id);
    if (it != runners_.end()) it->second->request_stop(JobRunner::StopReason::kGone);
    return;
  }
  if (it != runners_.end()) {
    if (it->second->leaving()) {
      // Taken off and given back (pre-empted, then bound here again) while the old run is still
      // stopping: start the new run once the old one is done.
      relaunch_[id] = job;
      return;
    }
    it->second->update(job);
    if (job.status.cancel_requested) it->second->request_stop(JobRunner::StopReason::kCancelled);
    return;
  }
  if (finished_.count(id)) return;
  if (job.status.phase == model::JobPhase::kRunning) {
    runners_[id] = JobRunner::report_lost(context_, job);
    return;
  }
  // Started beside the job it pre-empted, still holding the GPU while it is dumped, it could find
  // the GPU's memory taken: it waits for it to leave, as Kubernetes binds a pre-empting pod only
  // once its victims are gone.
  if (Holder holder = leaving_holder(job); !holder.job.empty()) {
    if (!held_back_.count(id)) {
      spdlog::info("job bound, waits for {} job=\"{}\" node=\"{}\" leaving=\"{}\"", holder.what, id, name_, holder.job);
    }
    held_back_[id] = job;
    return;
  }
  held_back_.erase(id);
  spdlog::info("job bound job=\"{}\" node=\"{}\"", id, name_);
  runners_[id] = JobRunner::launch(context_, job);
}

AgentImpl::Holder AgentImpl::leaving_holder(const model::Job& job) const {
  std::set<int> wanted;
  for (const auto& binding : job.status.placement) {
    if (binding.node != name_) continue;
    for (const auto& g : binding.gpus) wanted.insert(g.index);
  }
  // The scheduler counted the leaving runs' host resources free when it bound `job`.
  model::HostShare used = model::host_share(job.spec, job.status.placement, name_);
  std::string leaving;
  for (const auto& [other, runner] : runners_) {
    if (other == job.meta.name || runner->finished()) continue;
    const model::HostShare share = runner->host_share();
    used.cpu_milli += share.cpu_milli;
    used.memory_mib += share.memory_mib;
    if (!runner->leaving()) continue;
    if (leaving.empty()) leaving = other;
    for (const auto& g : runner->binding().gpus) {
      if (wanted.count(g.index)) return {other, "its GPUs"};
    }
  }
  const HostResources& host = report_input_.host;
  if (!leaving.empty() && (used.cpu_milli > host.cpu_milli || used.memory_mib > host.memory_mib)) {
    return {leaving, "host CPU and memory"};
  }
  return {};
}

void AgentImpl::forget(const std::string& id) {
  std::lock_guard lock(mutex_);
  finished_.erase(id);
  relaunch_.erase(id);
  held_back_.erase(id);
  auto it = runners_.find(id);
  if (it != runners_.end()) it->second->request_stop(JobRunner::StopReason::kGone);
}

void AgentImpl::reaper_loop() {
  while (true) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait_for(lock, 1s, [&] { return reap_due_ || stopped_; });
      if (stopped_) return;
      reap_due_ = false;
    }
    reap();
  }
}

void AgentImpl::reap() {
  std::vector<std::shared_ptr<JobRunner>> done;
  {
    std::lock_guard lock(mutex_);
    for (auto it = runners_.begin(); it != runners_.end();) {
      if (it->second->finished()) {
        done.push_back(std::move(it->second));
        auto again = relaunch_.find(it->first);
        if (again != relaunch_.end() && !stopped_) {
          spdlog::info("job bound again job=\"{}\" node=\"{}\"", it->first, name_);
          it->second = JobRunner::launch(context_, again->second);
          relaunch_.erase(again);
          ++it;
          continue;
        }
        // A run that ended by itself is not started again by a late event; one taken off the node
        // may well be bound here again later.
        if (!done.back()->leaving()) finished_.insert(it->first);
        it = runners_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = held_back_.begin(); it != held_back_.end() && !stopped_;) {
      if (runners_.count(it->first) || !leaving_holder(it->second).job.empty()) {
        ++it;
        continue;
      }
      spdlog::info("job bound job=\"{}\" node=\"{}\" (the jobs it waited for have left)", it->first, name_);
      runners_[it->first] = JobRunner::launch(context_, it->second);
      it = held_back_.erase(it);
    }
  }
  done.clear();  // joins their threads, outside the lock
}

void AgentImpl::watch_loop() {
  auto backoff = 200ms;
  int64_t revision = 0;
  bool need_list = true;
  while (true) {
    auto api = std::make_shared<ServerApi>(context_.server, token(), 60s);
    {
      std::lock_guard lock(api_mutex_);
      if (stopped_) return;
      watch_api_ = api;
    }
    reap();
    if (need_list) {
      auto listed = relist(*api);
      if (!listed) {
        spdlog::warn("job list failed node=\"{}\" error=\"{}\"", name_, listed.error().to_string());
        if (!pause(backoff)) return;
        backoff = std::min<std::chrono::milliseconds>(backoff * 2, 10s);
        continue;
      }
      revision = *listed;
      need_list = false;
    }
    std::string buffer;
    bool gone = false;
    auto streamed = api->stream("/v1/jobs?watch=1&revision=" + std::to_string(revision), [&](std::string_view chunk) {
      buffer.append(chunk);
      size_t start = 0, end;
      while ((end = buffer.find('\n', start)) != std::string::npos) {
        Json event = Json::parse(std::string_view(buffer).substr(start, end - start), nullptr, false);
        start = end + 1;
        if (!event.is_object()) continue;
        std::string type = event.value("type", "");
        if (type == "ERROR") {
          gone = true;  // the history it asked for is gone (or the server is closing): list again
          continue;
        }
        const Json& object = event["object"];
        if (object.is_object() && object.contains("metadata")) {
          revision = std::max(revision, object["metadata"].value("revision", int64_t{0}));
        }
        auto job = model::job_from_json(object);
        if (!job) continue;
        if (type == "DELETED") {
          forget(job->meta.name);
        } else {
          reconcile(*job);
        }
      }
      buffer.erase(0, start);
      reap();
      return !gone;
    });
    {
      std::lock_guard lock(mutex_);
      if (stopped_) return;
    }
    if (gone || (streamed && *streamed == 410)) {
      need_list = true;
      continue;
    }
    if (!streamed) {
      // A timeout on a quiet watch is normal; anything else is worth a line, then list again.
      if (streamed.error().message.find("timed out") == std::string::npos &&
          streamed.error().message.find("timeout") == std::string::npos) {
        spdlog::warn("job watch ended node=\"{}\" error=\"{}\"", name_, streamed.error().to_string());
        need_list = true;
        if (!pause(backoff)) return;
        backoff = std::min<std::chrono::milliseconds>(backoff * 2, 10s);
      }
      continue;
    }
    backoff = 200ms;
  }
}

std::string AgentImpl::node_address(const std::string& node) {
  if (node == name_) return report_input_.address;
  {
    std::lock_guard lock(mutex_);
    auto it = addresses_.find(node);
    if (it != addresses_.end()) return it->second;
  }
  ServerApi api(context_.server, token());
  auto answer = api.call("GET", "/v1/nodes/" + node);
  if (!answer) return node;  // the node name is the best guess left
  std::string address = (*answer)["status"].value("address", node);
  // "host:port" -> host; "[v6]:port" -> v6.
  if (!address.empty() && address.front() == '[') {
    address = address.substr(1, address.find(']') - 1);
  } else if (std::count(address.begin(), address.end(), ':') == 1) {
    address = address.substr(0, address.find(':'));
  }
  std::lock_guard lock(mutex_);
  addresses_[node] = address;
  return address;
}

net::Response AgentImpl::serve_metrics(const net::Request& request) {
  net::Response response;
  if (request.path != "/metrics") {
    response.status = 404;
    response.body = R"({"error":{"code":"not_found","message":"only /metrics is served here"}})";
    return response;
  }
  AgentMetricsInput input;
  input.node = name_;
  input.gpus = gpus_->gpus();
  for (const auto& g : input.gpus) {
    if (auto usage = gpus_->usage(g.index); usage) input.usage.push_back(*usage);
  }
  {
    std::lock_guard lock(mutex_);
    for (const auto& [id, runner] : runners_) {
      input.jobs.push_back({id, runner->project(), runner->binding(), runner->running()});
    }
  }
  input.counters = &counters_;
  if (vgpu_control_) input.vgpu = vgpu_control_->last_sample();
  input.heartbeats_ok = heartbeats_ok_;
  input.heartbeats_failed = heartbeats_failed_;
  auto [rss, cpu] = own_usage();
  input.rss_bytes = rss;
  input.cpu_seconds = cpu;
  response.content_type = "text/plain; version=0.0.4";
  response.body = render_agent_metrics(input);
  return response;
}

}  // namespace

Result<std::unique_ptr<Agent>> Agent::start(const AgentConfig& config) {
  if (config.server.empty()) return Error::invalid_argument("--server", "", "is required (https://host:port)");
  if (config.shim_command.empty()) return Error::invalid_argument("shim_command", "", "is required");
  auto agent = std::make_unique<AgentImpl>(config);
  if (auto ok = agent->open(); !ok) return ok.error();
  return std::unique_ptr<Agent>(std::move(agent));
}

}  // namespace cnlab::agent
