// The node's GPUs as the agent sees them, behind one interface with two implementations: NVML
// (real hardware, nvml_backend.h) and simulated (machines without GPUs, simulated_backend.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "model/gpu_catalog.h"
#include "model/mig_layout.h"
#include "model/node.h"

namespace cnlab::agent {

// One MIG instance as it exists on the GPU: where it sits, and the UUID a process is given in
// CUDA_VISIBLE_DEVICES to run inside it ("MIG-..."; empty when the driver would not tell).
struct MigDevice {
  model::MigInstance instance;
  std::string uuid;

  bool operator==(const MigDevice&) const = default;
};

struct GpuInfo {
  // Position in the backend's list, 0..n-1: what model::Gpu::index and every GpuBackend call use.
  int index = 0;
  // The driver's own index (nvmlDeviceGetHandleByIndex). It differs from `index` when a device
  // before it was skipped; it is not CUDA's order either, so address a device by `uuid`.
  int device_index = 0;
  std::string uuid;  // "GPU-..." from the driver; "GPU-<node>-<i>" when simulated
  std::string name;  // as the driver reports it: "NVIDIA H100 80GB HBM3"
  model::ModelId model = 0;
  int64_t memory_mib = 0;  // total, as reported; the catalog's when the driver could not tell
  bool mig_enabled = false;
  std::vector<MigDevice> mig_devices;  // in start-slot order; empty unless mig_enabled
  bool healthy = true;
  std::string unhealthy_reason;  // "XidError 79", "EccUncorrectable", ...; empty while healthy
  bool simulated = false;

  std::vector<model::MigInstance> mig_instances() const;
};

// What a GPU is doing right now, for heartbeats and metrics.
struct GpuUsage {
  int index = 0;
  int64_t memory_total_mib = 0;
  int64_t memory_used_mib = 0;
  std::optional<int> utilization_percent;  // absent where the driver does not support it
  std::optional<int> compute_processes;    // absent where the driver could not tell
};

// How much of a GPU one process used over the last sample period (NVML's process utilization).
struct ProcessUtilization {
  int pid = 0;  // in the host's PID namespace
  int sm_percent = 0;
};

// A GPU that has just become unhealthy.
struct HealthEvent {
  int index = 0;
  std::string uuid;
  std::string reason;

  bool operator==(const HealthEvent&) const = default;
};

// Thread-safe: every implementation serializes calls on one mutex. No call throws.
class GpuBackend {
 public:
  virtual ~GpuBackend() = default;

  // "nvml" or "simulated", for logs and the node's labels.
  virtual std::string_view kind() const = 0;

  // The usable GPUs, by index. Cheap (a copy of what the backend keeps); MIG layouts and health
  // reflect the last change made through this backend and the last poll_health().
  virtual std::vector<GpuInfo> gpus() const = 0;

  // Live memory use and utilization of GPU `index`. Error: an index out of range, or the driver
  // failing the memory query.
  virtual Result<GpuUsage> usage(int index) = 0;

  // Checks for new faults without blocking (XID critical errors, uncorrectable ECC errors; for
  // the simulated backend also injected faults and fault files) and returns the GPUs that became
  // unhealthy in this call. Unhealthiness is sticky: a GPU stays unhealthy until the agent
  // restarts. Call it periodically (every few seconds) from one place in the agent.
  virtual std::vector<HealthEvent> poll_health() = 0;

  // The processes that used GPU `index` since the previous call for it, each with its share of the
  // time. Empty where the driver cannot tell (a MIG GPU, an old driver, the simulated backend).
  virtual std::vector<ProcessUtilization> process_utilization(int index) {
    (void)index;
    return {};
  }

  // -- MIG primitives, for MigManager. Call MigManager::apply instead: it refuses illegal layouts
  //    before any of these run, checks that the GPU is idle, and diffs.

  // The instances on GPU `index` now, read from the driver (and remembered for gpus()).
  virtual Result<std::vector<MigDevice>> read_mig_devices(int index) = 0;
  // How many compute processes run on GPU `index` (any of its instances).
  virtual Result<int> compute_processes(int index) = 0;
  // Creates the GPU instance at its placement, then one compute instance spanning all of it.
  virtual Status create_mig_instance(int index, const model::MigInstance& instance) = 0;
  // Destroys the compute instances in the GPU instance at `instance`, then the GPU instance.
  virtual Status destroy_mig_instance(int index, const model::MigInstance& instance) = 0;
};

// The GPUs for the node object the agent registers: index, uuid, model, memory_mib, healthy,
// mig_enabled, mig_instances, simulated. Indices are 0..n-1, as model::validate requires.
std::vector<model::Gpu> to_model_gpus(const std::vector<GpuInfo>& gpus);
inline std::vector<model::Gpu> to_model_gpus(const GpuBackend& backend) { return to_model_gpus(backend.gpus()); }

}  // namespace cnlab::agent
