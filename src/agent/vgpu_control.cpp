#include "agent/vgpu_control.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace cnlab::agent {
namespace {

Time now_seconds() { return std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now()); }

// Field 22 of /proc/<pid>/stat (start time in clock ticks): tells a reused pid from the old one.
uint64_t start_ticks_of(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return 0;
}

}  // namespace

VgpuControl::VgpuControl(VgpuNode& node, GpuBackend& gpus, std::function<std::unique_ptr<ServerApi>()> api,
                         std::function<int(const std::string& job)> priority_of, Options options)
    : node_(node), gpus_(gpus), make_api_(std::move(api)), priority_of_(std::move(priority_of)), options_(options) {}

VgpuControl::~VgpuControl() { stop(); }

void VgpuControl::start() { thread_ = std::thread([this] { run(); }); }

void VgpuControl::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    if (api_) api_->interrupt();
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::vector<VgpuTenantSample> VgpuControl::last_sample() const {
  std::lock_guard lock(sample_mutex_);
  return last_sample_;
}

void VgpuControl::run() {
  {
    std::lock_guard lock(mutex_);
    api_ = make_api_();
  }
  auto next_memory = std::chrono::steady_clock::now();
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    compute_round();
    if (std::chrono::steady_clock::now() >= next_memory) {
      memory_round(*api_);
      next_memory = std::chrono::steady_clock::now() + options_.memory_period;
    }
    lock.lock();
    wake_.wait_for(lock, options_.compute_period, [this] { return stopping_; });
  }
}

std::string VgpuControl::job_of_pid(int pid) {
  uint64_t ticks = start_ticks_of(pid);
  auto it = pid_jobs_.find(pid);
  if (it != pid_jobs_.end() && it->second.first == ticks) return it->second.second;
  std::string job;
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ");
  std::string environ((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  static const std::string kKey = "CNLAB_VGPU_TENANT=";
  for (size_t at = 0; at < environ.size();) {
    size_t end = environ.find('\0', at);
    if (end == std::string::npos) end = environ.size();
    if (environ.compare(at, kKey.size(), kKey) == 0) job = environ.substr(at + kKey.size(), end - at - kKey.size());
    at = end + 1;
  }
  if (pid_jobs_.size() > 4096) pid_jobs_.clear();  // pids of processes long gone
  pid_jobs_[pid] = {ticks, job};
  return job;
}

void VgpuControl::compute_round() {
  std::map<std::string, std::map<std::string, double>> busy_by_uuid;
  for (const GpuInfo& gpu : gpus_.gpus()) {
    auto& busy = busy_by_uuid[gpu.uuid];
    for (const ProcessUtilization& p : gpus_.process_utilization(gpu.index)) {
      std::string job = job_of_pid(p.pid);
      if (!job.empty()) busy[job] += p.sm_percent / 100.0;
    }
  }
  node_.control_compute(options_.compute_period, [&](const std::string& uuid) {
    auto it = busy_by_uuid.find(uuid);
    return it == busy_by_uuid.end() ? std::map<std::string, double>{} : it->second;
  });
}

void VgpuControl::memory_round(ServerApi& api) {
  Time now = now_seconds();
  auto samples = node_.sample(now);
  {
    // Published before anything is reported, so that whoever hears of a job's use from the server
    // already finds it in the metrics.
    std::lock_guard lock(sample_mutex_);
    last_sample_ = samples;
  }
  auto report = [&](const std::string& job, Json body) {
    body["phase"] = "Running";
    auto done = api.call("PUT", "/v1/jobs/" + job + "/status", body.dump());
    if (!done) spdlog::warn("vgpu report failed job=\"{}\" error=\"{}\"", job, done.error().to_string());
    return done.has_value();
  };
  for (const VgpuAction& action : node_.control_memory(now, priority_of_)) {
    spdlog::info("vgpu action job=\"{}\" action={} detail=\"{}\"", action.job, to_string(action.kind), action.message);
    std::string text = std::string(to_string(action.kind)) + ": " + action.message;
    if (action.kind != VgpuAction::Kind::kMoveRequested) {
      report(action.job, {{"memory_event", text}});
      continue;
    }
    Json holding = Json::array();  // MiB, rounded up: the target needs room for every byte
    for (uint64_t bytes : action.held_bytes) holding.push_back((bytes + (uint64_t{1} << 20) - 1) >> 20);
    report(action.job, {{"move_requested", text}, {"holding_mib", holding}});
  }
  for (const VgpuTenantSample& s : samples) {
    if (!s.last_active) continue;
    auto it = reported_active_.find(s.job);
    if (it != reported_active_.end() && *s.last_active - it->second < options_.activity_report_every) continue;
    if (report(s.job, {{"gpu_active_at", format_rfc3339(*s.last_active)}})) reported_active_[s.job] = *s.last_active;
  }
  for (auto it = reported_active_.begin(); it != reported_active_.end();) {
    bool present = false;
    for (const auto& s : samples) present |= s.job == it->first;
    it = present ? std::next(it) : reported_active_.erase(it);
  }
}

}  // namespace cnlab::agent
