// A Node: a machine with GPUs, as its agent reports it. Its JSON form is the API's.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/json_reader.h"
#include "common/time.h"
#include "model/gpu_catalog.h"
#include "model/mig_layout.h"
#include "model/object_meta.h"

namespace cnlab::model {

enum class NodePhase : uint8_t {
  kReady,     // accepts work
  kDraining,  // keeps its running work, accepts no new work
  kDown,      // missed its heartbeats or reported a fault
};
std::string_view to_string(NodePhase phase);

struct Gpu {
  int index = 0;
  std::string uuid;
  ModelId model = 0;
  int64_t memory_mib = 0;  // as reported; the catalog's when the agent could not tell
  bool healthy = true;
  bool mig_enabled = false;
  std::vector<MigInstance> mig_instances;  // a layout NVIDIA accepts (checked on decode)

  bool operator==(const Gpu&) const = default;
};

struct Node {
  ObjectMeta meta;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  NodePhase phase = NodePhase::kReady;
  bool unschedulable = false;  // cordoned by an operator
  bool simulated = false;      // GPUs come from the simulated backend, not real hardware
  std::vector<Gpu> gpus;       // gpus[i].index == i
  std::optional<Time> idle_since;      // when its last job ended; absent while busy
  std::optional<Time> last_heartbeat;

  bool schedulable() const { return phase == NodePhase::kReady && !unschedulable; }
  bool operator==(const Node&) const = default;
};

Json to_json(const Node& node);
Result<Node> node_from_json(const Json& json);
// The checks decoding applies, for nodes built in code: GPU indices 0..n-1, known models, MIG
// layouts NVIDIA accepts and only on MIG-capable models.
Status validate(const Node& node);

}  // namespace cnlab::model
