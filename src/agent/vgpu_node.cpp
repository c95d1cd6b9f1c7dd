#include "agent/vgpu_node.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include "vgpu/share_controller.h"

namespace cnlab::agent {
namespace {

namespace fs = std::filesystem;
using vgpu::kMaxGpus;
constexpr uint64_t kMiB = uint64_t{1} << 20;

std::string mib(uint64_t bytes) { return fmt::format("{} MiB", bytes / kMiB); }

}  // namespace

std::string_view to_string(VgpuAction::Kind kind) {
  switch (kind) {
    case VgpuAction::Kind::kBurstGranted: return "MemoryBurstGranted";
    case VgpuAction::Kind::kBurstTakenBack: return "MemoryBurstTakenBack";
    case VgpuAction::Kind::kMoveRequested: return "MoveRequested";
  }
  return "?";
}

Result<std::unique_ptr<VgpuNode>> VgpuNode::open(Options options) {
  std::error_code ec;
  for (const char* sub : {"tenants", "tenant-limits"}) {
    fs::create_directories(options.dir / sub, ec);
    if (ec) return Error::internal("cannot create " + (options.dir / sub).string() + ": " + ec.message());
    // Jobs run as another user: they must reach the files, and only the agent may add to the list.
    fs::permissions(options.dir / sub, fs::perms(0755), ec);
  }
  fs::permissions(options.dir, fs::perms(0755), ec);
  fs::remove(options.dir / "limits", ec);  // the node-wide region of earlier versions
  if (!fs::exists(options.library, ec)) {
    return Error::not_found("--vgpu-library", options.library.string(), "the interception library is not there");
  }
  auto node = std::unique_ptr<VgpuNode>(new VgpuNode(std::move(options)));
  // Tenants left from before a restart: map their regions again (their jobs may be adopted).
  for (const auto& entry : fs::directory_iterator(node->options_.dir / "tenants", ec)) {
    std::string job = entry.path().filename().string();
    Tenant t;
    std::string limits = node->limits_path(job).string();
    vgpu::LimitsRegion::Tenant* own = nullptr;
    if (vgpu::open_limits(limits.c_str(), true, &t.limits_file) != vgpu::RegionError::kOk ||
        !(own = vgpu::find_tenant(t.limits_file.region, job.c_str())) ||
        vgpu::open_tenant(entry.path().c_str(), false, 0, job.c_str(), &t.region) != vgpu::RegionError::kOk) {
      vgpu::unmap(&t.limits_file);
      fs::remove(entry.path(), ec);
      fs::remove(limits, ec);
      continue;
    }
    t.limits = &own->limits;
    const vgpu::LimitsRegion* r = t.limits_file.region;
    for (uint32_t g = 0; g < r->gpu_count.load() && g < kMaxGpus; ++g) t.gpus.emplace_back(r->gpus[g].uuid);
    node->tenants_.emplace(job, std::move(t));
  }
  return node;
}

VgpuNode::~VgpuNode() {
  for (auto& [job, t] : tenants_) {
    vgpu::unmap(&t.region);
    vgpu::unmap(&t.limits_file);
  }
}

fs::path VgpuNode::tenant_path(const std::string& job) const { return options_.dir / "tenants" / job; }
fs::path VgpuNode::limits_path(const std::string& job) const { return options_.dir / "tenant-limits" / job; }

std::vector<std::string> VgpuNode::gpus_in_use_locked() const {
  std::vector<std::string> uuids;
  for (const auto& [job, t] : tenants_) uuids.insert(uuids.end(), t.gpus.begin(), t.gpus.end());
  std::sort(uuids.begin(), uuids.end());
  uuids.erase(std::unique(uuids.begin(), uuids.end()), uuids.end());
  return uuids;
}

int VgpuNode::Tenant::index_of(const std::string& uuid) const {
  auto it = std::find(gpus.begin(), gpus.end(), uuid);
  return it == gpus.end() ? -1 : static_cast<int>(it - gpus.begin());
}

Result<std::vector<std::string>> VgpuNode::add_job(const std::string& job, const model::NodeBinding& binding,
                                                   const std::vector<GpuInfo>& gpus, std::optional<uint32_t> uid,
                                                   std::optional<uint32_t> gid) {
  std::lock_guard lock(mutex_);
  if (!tenants_.count(job) && tenants_.size() >= static_cast<size_t>(vgpu::kMaxTenants)) {
    return Error::failed_precondition(fmt::format("this node already runs {} jobs on its GPUs", vgpu::kMaxTenants));
  }
  if (binding.gpus.size() > static_cast<size_t>(kMaxGpus)) {
    return Error::invalid_argument("placement.gpus", std::to_string(binding.gpus.size()),
                                   fmt::format("at most {} GPUs and MIG instances", kMaxGpus));
  }
  for (const model::GpuBinding& b : binding.gpus) {
    if (b.index < 0 || b.index >= static_cast<int>(gpus.size())) {
      return Error::invalid_argument("placement.gpus.index", std::to_string(b.index), "not a GPU of this node");
    }
  }
  Tenant& t = tenants_[job];
  if (!t.limits_file) {
    fs::path path = limits_path(job);
    vgpu::RegionError e = vgpu::create_limits(path.c_str(), 0644, &t.limits_file);
    if (e != vgpu::RegionError::kOk) {
      tenants_.erase(job);
      return Error::internal(fmt::format("vGPU limits region {}: {}", path.string(), vgpu::region_error_text(e)));
    }
    vgpu::LimitsRegion* r = t.limits_file.region;
    t.limits = &vgpu::add_tenant(r, job.c_str())->limits;
    t.gpus.clear();
    for (const model::GpuBinding& b : binding.gpus) {
      const GpuInfo& gpu = gpus[static_cast<size_t>(b.index)];
      std::string uuid = gpu.uuid;
      uint64_t total = static_cast<uint64_t>(gpu.memory_mib) * kMiB;
      int partition_blocks = model::kBlocksPerGpu;
      if (b.mig_start >= 0) {
        for (const MigDevice& m : gpu.mig_devices) {
          if (m.instance.start != b.mig_start) continue;
          uuid = m.uuid;
          const auto& profile = model::gpu_model(gpu.model).mig_profiles[static_cast<size_t>(m.instance.profile)];
          total = static_cast<uint64_t>(profile.memory_mib) * kMiB;
          partition_blocks = profile.blocks();
        }
      }
      const int g = static_cast<int>(t.gpus.size());
      vgpu::set_gpu(r->gpus, &r->gpu_count, g, static_cast<uint32_t>(b.index), uuid.c_str(), total);
      uint64_t quota = b.vram_mib > 0 ? static_cast<uint64_t>(b.vram_mib) * kMiB : total;
      t.limits->memory_quota[g].store(quota);
      t.limits->memory_limit[g].store(quota);
      int share = partition_blocks > 0 ? std::clamp(b.blocks * 100 / partition_blocks, 1, 100) : 100;
      t.limits->compute_share[g].store(static_cast<uint32_t>(share));
      t.limits->launch_interval_ns[g].store(0);
      t.gpus.push_back(uuid);
    }
  }
  if (!t.region) {
    fs::path path = tenant_path(job);
    vgpu::RegionError e = vgpu::open_tenant(path.c_str(), true, 0644, job.c_str(), &t.region);
    if (e != vgpu::RegionError::kOk) {
      return Error::internal(fmt::format("tenant region {}: {}", path.string(), vgpu::region_error_text(e)));
    }
    if (uid && ::fchown(t.region.fd, *uid, gid.value_or(0)) != 0) {
      return Error::internal(fmt::format("cannot give {} to uid {}", path.string(), *uid));
    }
  }
  spdlog::info("vgpu tenant registered job=\"{}\" gpus={}", job, t.gpus.size());
  return std::vector<std::string>{
      "LD_PRELOAD=" + options_.library.string(),
      "CNLAB_VGPU_REGION=" + limits_path(job).string(),
      "CNLAB_VGPU_DIR=" + options_.dir.string(),
      "CNLAB_VGPU_TENANT=" + job,
  };
}

void VgpuNode::remove_job(const std::string& job) {
  std::lock_guard lock(mutex_);
  auto it = tenants_.find(job);
  if (it != tenants_.end()) {
    vgpu::unmap(&it->second.region);
    vgpu::unmap(&it->second.limits_file);
    tenants_.erase(it);
  }
  std::error_code ec;
  fs::remove(tenant_path(job), ec);
  fs::remove(limits_path(job), ec);
}

Status VgpuNode::save_tenant(const std::string& job, const fs::path& to) {
  std::lock_guard lock(mutex_);
  auto it = tenants_.find(job);
  if (it == tenants_.end() || !it->second.region) return Error::not_found("vgpu tenant", job, "not registered here");
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(it->second.region.region), sizeof(vgpu::TenantRegion));
  out.close();
  if (!out) return Error::internal("cannot write " + to.string());
  return {};
}

Status VgpuNode::restore_tenant(const std::string& job, const fs::path& from) {
  std::ifstream in(from, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() != sizeof(vgpu::TenantRegion)) {
    return Error::invalid_argument("vgpu tenant region", from.string(),
                                   fmt::format("{} bytes, where a tenant region of this version has {}", bytes.size(),
                                               sizeof(vgpu::TenantRegion)));
  }
  // Only the header is read before the check; the rest is copied as it is.
  vgpu::TenantRegion* saved = reinterpret_cast<vgpu::TenantRegion*>(bytes.data());
  if (saved->magic != vgpu::kTenantMagic || saved->version != vgpu::kRegionVersion ||
      saved->size != sizeof(vgpu::TenantRegion) || std::string(saved->id, strnlen(saved->id, vgpu::kIdSize)) != job) {
    return Error::invalid_argument("vgpu tenant region", from.string(), "not job " + job + "'s tenant region of this version");
  }
  std::lock_guard lock(mutex_);
  auto it = tenants_.find(job);
  if (it == tenants_.end() || !it->second.region) return Error::not_found("vgpu tenant", job, "not registered here");
  Tenant& t = it->second;
  vgpu::TenantRegion* region = t.region.region;
  std::memcpy(static_cast<void*>(region), bytes.data(), bytes.size());
  for (auto& due : region->next_launch_ns) due.store(0);  // CLOCK_MONOTONIC of the node that dumped it
  for (auto& proc : region->procs) proc.host_pid.store(0);
  // Counters carry on from what the job had done: the next control period sees only what is new.
  for (int g = 0; g < kMaxGpus; ++g) {
    t.last_launches[g] = t.last_waited[g] = 0;
    for (int p = 0; p < vgpu::kMaxProcs; ++p) {
      t.last_launches[g] += region->launches[g][p].load();
      t.last_waited[g] += region->waited_ns[g][p].load();
    }
    t.last_paced[g] = region->paced_ns[g].load();
  }
  t.restoring = true;
  return {};
}

void VgpuNode::restored(const std::string& job) {
  std::lock_guard lock(mutex_);
  if (auto it = tenants_.find(job); it != tenants_.end()) it->second.restoring = false;
}

void VgpuNode::retain_only(const std::vector<std::string>& keep) {
  std::vector<std::string> gone;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [job, t] : tenants_) {
      if (std::find(keep.begin(), keep.end(), job) == keep.end()) gone.push_back(job);
    }
  }
  for (const auto& job : gone) remove_job(job);
}

std::vector<VgpuTenantSample> VgpuNode::sample(Time now) {
  std::lock_guard lock(mutex_);
  std::vector<VgpuTenantSample> out;
  for (auto& [job, t] : tenants_) {
    vgpu::TenantRegion* region = t.region.region;
    if (!region || !t.limits) continue;
    if (!t.restoring) vgpu::reap_dead_procs(region, t.region.fd, -1);
    VgpuTenantSample s;
    s.job = job;
    for (int g = 0; g < static_cast<int>(t.gpus.size()); ++g) {
      VgpuTenantGpu gpu;
      gpu.uuid = t.gpus[static_cast<size_t>(g)];
      gpu.usage_bytes = vgpu::tenant_usage(region, g);
      gpu.limit_bytes = t.limits->memory_limit[g].load();
      gpu.quota_bytes = t.limits->memory_quota[g].load();
      gpu.peak_bytes = region->peak_usage[g].load();
      gpu.oom_refusals = region->oom_refusals[g].load();
      gpu.share_percent = t.limits->compute_share[g].load();
      gpu.launch_interval_ns = t.limits->launch_interval_ns[g].load();
      s.gpus.push_back(gpu);
    }
    for (int g = 0; g < kMaxGpus; ++g) {
      for (int p = 0; p < vgpu::kMaxProcs; ++p) {
        s.launches += region->launches[g][p].load(std::memory_order_relaxed);
        s.copies += region->copies[g][p].load(std::memory_order_relaxed);
      }
    }
    s.ipc_refusals = region->ipc_refusals.load();
    // Counters of a process that exited go with its slot; any change at all is activity.
    uint64_t activity = s.launches + s.copies;
    if (activity != t.last_activity_count) {
      t.last_activity_count = activity;
      t.last_active = now;
    }
    s.last_active = t.last_active;
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<VgpuAction> VgpuNode::control_memory(Time now, const std::function<int(const std::string& job)>& priority_of) {
  std::lock_guard lock(mutex_);
  std::vector<VgpuAction> actions;
  for (const std::string& uuid : gpus_in_use_locked()) {
    struct Holder {
      const std::string* job;
      Tenant* tenant;
      int gpu;  // the GPU's index in the tenant's regions
      uint64_t usage, limit, quota;
    };
    std::vector<Holder> holders;
    uint64_t total = 0;
    for (auto& [job, t] : tenants_) {
      const int g = t.index_of(uuid);
      if (g < 0 || !t.region || !t.limits) continue;
      holders.push_back({&job, &t, g, vgpu::tenant_usage(t.region.region, g), t.limits->memory_limit[g].load(),
                         t.limits->memory_quota[g].load()});
      total = t.limits_file.region->gpus[g].total_bytes.load();
    }
    if (holders.empty()) continue;
    // What the GPU's tenants hold or were promised (their quota, or more where they use more).
    uint64_t claimed = 0, owed = 0, used = 0;
    for (const Holder& h : holders) {
      claimed += std::max(h.limit, h.usage);
      used += h.usage;
      if (h.usage < h.quota) owed += h.quota - h.usage;
    }
    const uint64_t free_now = total > used ? total - used : 0;
    if (free_now < owed) {
      // Short: the promised quotas no longer fit beside the bursts. Take back headroom first.
      for (Holder& h : holders) {
        uint64_t floor = std::max(h.quota, h.usage);
        if (h.limit > floor) {
          h.tenant->limits->memory_limit[h.gpu].store(floor);
          actions.push_back({VgpuAction::Kind::kBurstTakenBack, *h.job,
                             fmt::format("GPU {} short of memory: limit {} -> {} (quota {}, in use {})",
                                         uuid, mib(h.limit), mib(floor), mib(h.quota), mib(h.usage)),
                             {}});
          h.limit = floor;
        }
      }
      // Still short: someone holds memory beyond its quota that another's quota needs. Name the
      // cheapest such tenant (lowest priority, then the least memory to move) for a move.
      uint64_t beyond = 0;
      for (const Holder& h : holders) beyond += h.usage > h.quota ? h.usage - h.quota : 0;
      if (beyond > 0) {
        const Holder* cheapest = nullptr;
        for (const Holder& h : holders) {
          if (h.usage <= h.quota) continue;
          if (h.tenant->last_move_request && now - *h.tenant->last_move_request < options_.move_request_every) continue;
          if (!cheapest || priority_of(*h.job) < priority_of(*cheapest->job) ||
              (priority_of(*h.job) == priority_of(*cheapest->job) && h.usage < cheapest->usage)) {
            cheapest = &h;
          }
        }
        if (cheapest) {
          Tenant& moving = *cheapest->tenant;
          moving.last_move_request = now;
          std::vector<uint64_t> held;
          for (size_t g = 0; g < moving.gpus.size(); ++g) {
            held.push_back(vgpu::tenant_usage(moving.region.region, static_cast<int>(g)));
          }
          actions.push_back({VgpuAction::Kind::kMoveRequested, *cheapest->job,
                             fmt::format("GPU {} short of memory: it holds {} beyond its {} quota, which other jobs' "
                                         "quotas need ({} promised and not yet used, {} free)",
                                         uuid, mib(cheapest->usage - cheapest->quota), mib(cheapest->quota),
                                         mib(owed), mib(free_now)),
                             std::move(held)});
        }
      }
      continue;
    }
    // Room to spare: tenants nearing their limit get a burst from memory no one has claimed.
    uint64_t unclaimed = total > claimed ? total - claimed : 0;
    for (Holder& h : holders) {
      if (unclaimed == 0) break;
      if (h.limit == 0 || static_cast<double>(h.usage) < options_.near_limit * static_cast<double>(h.limit)) continue;
      uint64_t step = std::max<uint64_t>(options_.min_burst, static_cast<uint64_t>(options_.burst_step * static_cast<double>(h.quota)));
      step = std::min(step, unclaimed);
      h.tenant->limits->memory_limit[h.gpu].store(h.limit + step);
      unclaimed -= step;
      actions.push_back({VgpuAction::Kind::kBurstGranted, *h.job,
                         fmt::format("GPU {}: limit {} -> {} (quota {}, in use {}; {} unclaimed left)", uuid,
                                     mib(h.limit), mib(h.limit + step), mib(h.quota), mib(h.usage), mib(unclaimed)),
                         {}});
    }
  }
  return actions;
}

void VgpuNode::control_compute(std::chrono::nanoseconds period,
                               const std::function<std::map<std::string, double>(const std::string& uuid)>& busy_of) {
  std::lock_guard lock(mutex_);
  for (const std::string& uuid : gpus_in_use_locked()) {
    struct OnGpu {
      Tenant* tenant;
      int gpu;  // the GPU's index in the tenant's regions
    };
    std::vector<OnGpu> on_gpu;
    std::vector<std::string> jobs;
    for (auto& [job, t] : tenants_) {
      const int g = t.index_of(uuid);
      if (g < 0 || !t.region || !t.limits) continue;
      on_gpu.push_back({&t, g});
      jobs.push_back(job);
    }
    if (on_gpu.empty()) continue;
    bool any_limited = false;
    for (const OnGpu& o : on_gpu) {
      any_limited |= o.tenant->limits->compute_share[o.gpu].load() < 100 || (o.tenant->limits->flags.load() & vgpu::kHardShare);
    }
    if (!any_limited) continue;
    std::map<std::string, double> busy = busy_of(uuid);
    std::vector<vgpu::ShareInput> inputs;
    for (size_t i = 0; i < on_gpu.size(); ++i) {
      Tenant* t = on_gpu[i].tenant;
      const int g = on_gpu[i].gpu;
      const vgpu::TenantLimits* limits = t->limits;
      uint64_t launches = 0, waited = 0;
      const vgpu::TenantRegion* region = t->region.region;
      for (int p = 0; p < vgpu::kMaxProcs; ++p) {
        launches += region->launches[g][p].load(std::memory_order_relaxed);
        waited += region->waited_ns[g][p].load(std::memory_order_relaxed);
      }
      uint64_t paced = region->paced_ns[g].load(std::memory_order_relaxed);
      auto since = [](uint64_t now, uint64_t& last) {
        uint64_t d = now >= last ? now - last : 0;
        last = now;
        return d;
      };
      const double period_ns = static_cast<double>(period.count());
      vgpu::ShareInput in;
      in.waiting = static_cast<double>(since(waited, t->last_waited[g])) / period_ns;
      in.paced = static_cast<double>(since(paced, t->last_paced[g])) / period_ns;
      in.share = limits->compute_share[g].load() / 100.0;
      in.hard = (limits->flags.load() & vgpu::kHardShare) != 0;
      auto b = busy.find(jobs[i]);
      in.busy = b == busy.end() ? 0 : std::min(1.0, b->second);
      in.launches = since(launches, t->last_launches[g]);
      in.interval_ns = limits->launch_interval_ns[g].load();
      inputs.push_back(in);
    }
    std::vector<uint64_t> intervals(inputs.size());
    vgpu::next_intervals(inputs.data(), inputs.size(), static_cast<uint64_t>(period.count()), intervals.data());
    for (size_t i = 0; i < on_gpu.size(); ++i) on_gpu[i].tenant->limits->launch_interval_ns[on_gpu[i].gpu].store(intervals[i]);
  }
}

}  // namespace cnlab::agent
