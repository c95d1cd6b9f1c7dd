// The node's side of the 1% blocks: the agent owns the vGPU limits region (vgpu/region.h) every job
// that uses a GPU maps, registers each job as a tenant with the memory quota and compute share its
// binding gives, hands the job the variables that load libcnlab-vgpu.so, and watches what the
// tenants do:
//  - activity: launches and copies per tenant, so the server can reclaim slices left idle;
//  - memory (proactive control): a tenant nearing its limit on a GPU with unclaimed memory is
//    granted a burst; when the GPU runs short of what its tenants were promised, bursts with
//    headroom are taken back, and if that is not enough the cheapest tenant holding memory beyond
//    its quota is named for the scheduler to move or pre-empt, before anyone sees an out-of-memory
//    error;
//  - compute: the share control law (vgpu/share_controller.h) from the GPU time each tenant's
//    processes used, as NVML reports it.
// Every change it makes to a limit is returned as an action for the agent to report (and the
// server to audit).
//
// Files, per job: `<data-dir>/vgpu/tenant-limits/<job>` (0644, the agent's: a limits region that
// lists only the job's GPUs and only the job) and `<data-dir>/vgpu/tenants/<job>` (owned by the user
// the job runs as, so that its processes can record their usage and nobody else's). Both number the
// job's GPUs 0, 1, ... in the order of its binding, never by the node's numbering: nothing a job's
// processes hold names this node, so a dump of them can be restored onto another node's GPUs
// (paired in the same order) with its regions written there the same way.
// Thread-safe (one mutex).
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "agent/gpu/gpu_backend.h"
#include "common/result.h"
#include "common/time.h"
#include "model/job.h"
#include "vgpu/region.h"

namespace cnlab::agent {

struct VgpuAction {
  enum class Kind { kBurstGranted, kBurstTakenBack, kMoveRequested };
  Kind kind;
  std::string job;
  std::string message;  // for the job's events and the audit log
  // kMoveRequested: what the job's processes hold on each of its GPUs, in its binding's order, so
  // that it moves where all of it fits and not only its quota.
  std::vector<uint64_t> held_bytes;
};
std::string_view to_string(VgpuAction::Kind kind);

// What one tenant did on one of its GPUs since the previous sample.
struct VgpuTenantGpu {
  std::string uuid;
  uint64_t usage_bytes = 0;
  uint64_t limit_bytes = 0;
  uint64_t quota_bytes = 0;
  uint64_t peak_bytes = 0;
  uint64_t oom_refusals = 0;
  uint32_t share_percent = 100;
  uint64_t launch_interval_ns = 0;
};
struct VgpuTenantSample {
  std::string job;
  std::vector<VgpuTenantGpu> gpus;
  uint64_t launches = 0;  // totals since the job started
  uint64_t copies = 0;
  uint64_t ipc_refusals = 0;
  std::optional<Time> last_active;  // when launches or copies last changed, as this agent saw
};

class VgpuNode {
 public:
  struct Options {
    std::filesystem::path dir;      // <data-dir>/vgpu
    std::filesystem::path library;  // libcnlab-vgpu.so
    // Memory control: a tenant at this fraction of its limit is nearing it; bursts go in steps of
    // this fraction of its quota (at least `min_burst`).
    double near_limit = 0.9;
    double burst_step = 0.25;
    uint64_t min_burst = uint64_t{256} << 20;
    std::chrono::seconds move_request_every{60};  // at most one request per job this often
  };

  static Result<std::unique_ptr<VgpuNode>> open(Options options);
  ~VgpuNode();

  // Registers `job` (bound here with `binding`) as a tenant: its memory quota (the binding's
  // vram_mib) and compute share (its blocks, as a percent of the GPU or MIG instance) on each GPU it
  // holds; creates its tenant region owned by `uid`/`gid` (when given). Returns the variables the
  // job's processes need. Calling it again for a registered job (a restart) keeps its limits.
  Result<std::vector<std::string>> add_job(const std::string& job, const model::NodeBinding& binding,
                                           const std::vector<GpuInfo>& gpus, std::optional<uint32_t> uid,
                                           std::optional<uint32_t> gid);
  void remove_job(const std::string& job);

  // -- A job dumped with the library attached (docs/checkpoint.md) --
  // Writes the job's tenant region as it is now into `to`. Called while the job's processes are
  // stopped right after their dump, so what it says they hold is what the dump holds.
  Status save_tenant(const std::string& job, const std::filesystem::path& to);
  // Before such a dump is restored here: the job's tenant region (add_job registered it) takes what
  // `from` (save_tenant's file, from any node) says: its processes' slots, what each holds on each
  // of the job's GPUs (numbered alike on every node), its counters. Launch pacing starts afresh
  // (its clock was the other node's). The slots are not reaped until restored(job), since their
  // processes take their record locks back only as the restore brings them back.
  Status restore_tenant(const std::string& job, const std::filesystem::path& from);
  void restored(const std::string& job);
  // Removes every tenant not in `keep` (after an agent restart, those whose jobs were not adopted).
  void retain_only(const std::vector<std::string>& keep);

  std::vector<VgpuTenantSample> sample(Time now);
  // One round of memory control over every GPU; returns what it changed. `priority_of` orders
  // tenants for a move request (lower first), e.g. by class.
  std::vector<VgpuAction> control_memory(Time now, const std::function<int(const std::string& job)>& priority_of);
  // One round of compute control: `busy_of(uuid)` gives, per job, the fraction of the last
  // `period` the GPU ran its processes' kernels (empty when the driver cannot tell).
  void control_compute(std::chrono::nanoseconds period,
                       const std::function<std::map<std::string, double>(const std::string& uuid)>& busy_of);

  const std::filesystem::path& library() const { return options_.library; }
  // Where the limits and tenant regions are, which the library maps into a job's processes.
  const std::filesystem::path& dir() const { return options_.dir; }

 private:
  explicit VgpuNode(Options options) : options_(std::move(options)) {}
  std::filesystem::path tenant_path(const std::string& job) const;
  std::filesystem::path limits_path(const std::string& job) const;
  std::vector<std::string> gpus_in_use_locked() const;  // every GPU some tenant holds (UUIDs)

  Options options_;
  std::mutex mutex_;
  struct Tenant {
    vgpu::Mapped<vgpu::LimitsRegion> limits_file;  // the job's own limits region
    vgpu::TenantLimits* limits = nullptr;          // its one entry
    vgpu::Mapped<vgpu::TenantRegion> region;
    std::vector<std::string> gpus;  // the job's GPUs (UUIDs), by the index both regions use
    int index_of(const std::string& uuid) const;  // -1 when the job does not hold it
    bool restoring = false;  // restore_tenant until restored(): its slots' locks are not back yet
    uint64_t last_activity_count = 0;
    std::optional<Time> last_active;
    std::optional<Time> last_move_request;
    uint64_t last_launches[vgpu::kMaxGpus] = {};
    uint64_t last_waited[vgpu::kMaxGpus] = {};
    uint64_t last_paced[vgpu::kMaxGpus] = {};
  };
  std::map<std::string, Tenant> tenants_;
};

}  // namespace cnlab::agent
