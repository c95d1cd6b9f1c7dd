// The node's real GPUs, through NVIDIA's NVML, loaded with dlopen at run time so that the agent
// builds and runs on machines without the driver.
#pragma once

#include <memory>
#include <string>

#include "agent/gpu/gpu_backend.h"

namespace cnlab::agent {

struct NvmlOptions {
  // What dlopen is given: a soname searched the usual way, or a path (tests pass the fake's).
  std::string library = "libnvidia-ml.so.1";
};

class NvmlBackend final : public GpuBackend {
 public:
  // Loads the library, initializes NVML and takes the inventory. Never fails and never throws: a
  // library that is absent or lacks a required function, or an nvmlInit that fails, gives a
  // backend with zero GPUs (loaded() false) and exactly one log line saying why. A device whose
  // handle, UUID or name cannot be read, or whose name is not a catalog model, is skipped with one
  // log line; one whose other queries fail is reported unhealthy ("NvmlQueryFailed") with a log
  // line. Indices are dense (GpuInfo::index), device_index keeps NVML's.
  static std::unique_ptr<NvmlBackend> open(const NvmlOptions& options = {});
  ~NvmlBackend() override;  // frees the event set, shuts NVML down, unloads the library

  bool loaded() const;
  const std::string& load_error() const;  // why loaded() is false; empty when loaded

  std::string_view kind() const override { return "nvml"; }
  std::vector<GpuInfo> gpus() const override;
  // Memory from nvmlDeviceGetMemoryInfo; utilization absent where NVML says NOT_SUPPORTED (which it
  // does for a GPU in MIG mode).
  Result<GpuUsage> usage(int index) override;
  // Drains the event set without waiting (nvmlEventSetWait_v2 with a 0 ms timeout): Xid critical
  // errors (see health.h for the application-level Xids that are ignored) and double-bit ECC
  // events; then reads the volatile uncorrectable ECC counter of each healthy GPU (any count > 0 is
  // a fault). Events or counters a GPU does not support are skipped, not errors.
  std::vector<HealthEvent> poll_health() override;
  Result<std::vector<MigDevice>> read_mig_devices(int index) override;
  Result<int> compute_processes(int index) override;
  // nvmlDeviceGetProcessUtilization since the previous call (the first: over the last second).
  std::vector<ProcessUtilization> process_utilization(int index) override;
  Status create_mig_instance(int index, const model::MigInstance& instance) override;
  Status destroy_mig_instance(int index, const model::MigInstance& instance) override;

 private:
  struct Impl;
  explicit NvmlBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cnlab::agent
