// GPUs that do not exist, for machines without one (a laptop, CI, a demo), chosen with the agent's
// `--simulate-gpus` flag. Every GPU it reports is labelled simulated. It keeps MIG layouts with
// NVIDIA's placement rules (model::MigLayout), so the MIG manager is exercised without hardware,
// and faults can be injected: from code (inject_xid, inject_ecc) or from outside the process with
// a fault file (see SimulatedOptions::fault_dir).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "agent/gpu/gpu_backend.h"

namespace cnlab::agent {

struct SimulatedGpuGroup {
  model::ModelId model = 0;
  int count = 1;
  bool mig_enabled = false;

  bool operator==(const SimulatedGpuGroup&) const = default;
};

inline constexpr int kMaxSimulatedGpus = 64;

// Parses the value of `--simulate-gpus`: comma-separated `<model>x<count>` groups, in index order,
// e.g. "h100x8,l4x2" (8 H100 at indices 0..7, then 2 L4 at 8..9). `<model>` alone means one GPU;
// a `:mig` suffix ("a100m80x2:mig") starts those GPUs in MIG mode (MIG-capable models only), as an
// operator would have set with nvidia-smi before starting the agent. Models are the catalog's,
// except those whose memory is undisclosed; count is 1..64 in all. Errors name `--simulate-gpus`,
// the value, and what is allowed.
Result<std::vector<SimulatedGpuGroup>> parse_simulated_gpus(std::string_view spec);

struct SimulatedOptions {
  // The node's name: UUIDs are "GPU-<node_name>-<index>" (model::simulated_node's convention), so
  // they stay the same across agent restarts with the same spec.
  std::string node_name;
  std::vector<SimulatedGpuGroup> groups;
  // When set, poll_health() looks for `<fault_dir>/gpu<index>.fault` and makes GPU <index>
  // unhealthy when it exists; its first line is the reason (e.g. "XidError 79"; an empty file
  // means "InjectedFault"). Removing the file does not heal the GPU: health is sticky, as on
  // hardware. This is how an end-to-end test breaks a GPU of a running agent:
  //   echo "XidError 79" > "$FAULT_DIR/gpu3.fault"
  std::string fault_dir;
};

class SimulatedBackend final : public GpuBackend {
 public:
  explicit SimulatedBackend(SimulatedOptions options);
  // Parses `spec` (see parse_simulated_gpus) and builds the backend.
  static Result<std::unique_ptr<SimulatedBackend>> create(std::string node_name, std::string_view spec,
                                                          std::string fault_dir = {});

  std::string_view kind() const override { return "simulated"; }
  std::vector<GpuInfo> gpus() const override;
  Result<GpuUsage> usage(int index) override;
  std::vector<HealthEvent> poll_health() override;
  Result<std::vector<MigDevice>> read_mig_devices(int index) override;
  Result<int> compute_processes(int index) override;
  // Refuses what the driver would refuse: MIG off, a start the profile may not use, an overlap,
  // more than 7 compute slices (the error says which).
  Status create_mig_instance(int index, const model::MigInstance& instance) override;
  Status destroy_mig_instance(int index, const model::MigInstance& instance) override;

  // -- Fault injection and state for tests and demos. Each refuses an index out of range.
  // A fault takes effect at the next poll_health(), the way a driver event would arrive.
  Status inject_xid(int index, unsigned long long xid);  // ignored like hardware for app-level Xids
  Status inject_ecc(int index);                          // an uncorrectable ECC error
  // What usage() and compute_processes() report; the MIG manager refuses a GPU with processes.
  Status set_compute_processes(int index, int count);
  Status set_usage(int index, int64_t memory_used_mib, int utilization_percent);

 private:
  struct Gpu {
    explicit Gpu(model::ModelId model) : layout(model) {}
    GpuInfo info;
    model::MigLayout layout;
    int processes = 0;
    int64_t memory_used_mib = 0;
    int utilization = 0;
    std::vector<std::string> pending_faults;
  };
  Status check_index(int index) const;
  void refresh_mig_devices(Gpu& gpu);

  mutable std::mutex mu_;
  std::string fault_dir_;
  std::vector<Gpu> gpus_;
};

}  // namespace cnlab::agent
