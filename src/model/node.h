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

// The node lifecycle controller's summary of a node. Only Ready nodes take new work.
//   Ready     heartbeating and healthy, accepts work
//   NotReady  its agent reports, but the node cannot take work now (starting up, a fault it
//             reported, a late heartbeat inside the grace period)
//   Lost      missed its heartbeats past the grace period; its jobs are presumed gone
//   Cordoned  an operator cordoned it: keeps its running work, accepts no new work. Cordoning sets
//             both phase = Cordoned and spec.unschedulable = true; uncordoning clears both.
//   Draining  like Cordoned (unschedulable is true too), and its running jobs are being moved off
//             or waited for
// JSON names are exactly the enumerator names without the k: "Ready", "NotReady", ...
enum class NodePhase : uint8_t { kReady, kNotReady, kLost, kCordoned, kDraining };
std::string_view to_string(NodePhase phase);
std::optional<NodePhase> parse_node_phase(std::string_view name);

// A fact about a node, as its agent or the controller reports it: JSON {"type": "GpuHealthy",
// "status": true, "reason": "XidError", "message": "...", "last_transition": "RFC 3339"}.
struct NodeCondition {
  std::string type;  // UpperCamel, unique within a node: "GpuHealthy", "DiskPressure", ...
  bool status = false;
  std::string reason;                   // short UpperCamel cause, may be empty
  std::string message;                  // for people
  std::optional<Time> last_transition;  // when status last changed

  bool operator==(const NodeCondition&) const = default;
};

struct Gpu {
  int index = 0;
  std::string uuid;
  ModelId model = 0;
  int64_t memory_mib = 0;  // as reported; the catalog's when the agent could not tell
  bool healthy = true;
  bool mig_enabled = false;
  std::vector<MigInstance> mig_instances;  // a layout NVIDIA accepts (checked on decode)
  bool simulated = false;                  // this GPU comes from the simulated backend, not real hardware

  bool operator==(const Gpu&) const = default;
};

struct Node {
  ObjectMeta meta;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  NodePhase phase = NodePhase::kReady;
  bool unschedulable = false;  // cordoned by an operator
  // Drained with requeue (`cnlab admin node drain --requeue`): what cannot move live off it is
  // requeued rather than left to run to its end there. Cleared by uncordon and cordon.
  bool drain_requeues = false;
  bool simulated = false;      // GPUs come from the simulated backend, not real hardware
  std::vector<Gpu> gpus;       // gpus[i].index == i
  std::optional<Time> idle_since;      // when its last job ended; absent while busy
  // Idle for the scheduler's power_down_after with nothing reserved on it (the server fills it in
  // and idle_since when it serves a node; a record never holds them).
  bool power_down_candidate = false;
  std::optional<Time> last_heartbeat;
  std::vector<NodeCondition> conditions;
  std::string agent_version;  // the version of `cnlab agent` running there
  std::string address;        // where the agent can be reached ("10.0.0.12:7443"), as it reported it
  // HOST:PORT of the agent's peer endpoint, where other agents stream migrating jobs to it over
  // mutual TLS (node certificates); empty: it takes no migrations.
  std::string peer_address;
  // Its agent checkpoints and restores GPU state (NVIDIA's cuda-checkpoint): jobs holding GPUs may
  // migrate from and to it.
  bool gpu_checkpoint = false;

  // Whether it takes new work: Ready and not cordoned.
  bool schedulable() const { return phase == NodePhase::kReady && !unschedulable; }
  bool operator==(const Node&) const = default;
};

// JSON: spec {"unschedulable", "drain_requeues" (omitted when false)}; status {"phase", "cpu_milli", "memory_mib", "simulated", "gpus",
// "idle_since", "last_heartbeat", "conditions", "agent_version", "address", "peer_address", "gpu_checkpoint", "power_down_candidate"}; each GPU {"index",
// "uuid", "model", "memory_mib", "healthy", "mig_enabled", "mig_instances", "simulated"}. Empty
// conditions, agent_version, address and peer_address are omitted, and gpu_checkpoint and
// power_down_candidate when false.
Json to_json(const Node& node);
// Decodes and validates; the error names the JSON path of the first bad field, unknown fields are
// refused, and absent fields take the defaults above (JSON from before a field existed decodes).
Result<Node> node_from_json(const Json& json);
// The checks decoding applies, for nodes built in code: GPU indices 0..n-1, known models, MIG
// layouts NVIDIA accepts and only on MIG-capable models, condition types well formed and unique.
Status validate(const Node& node);

// A Ready node of `gpu_count` simulated GPUs of one model (UUIDs "GPU-<name>-<i>", the catalog's
// memory), labelled simulated: what the simulated GPU backend reports, and what tests and
// benchmarks register.
Node simulated_node(const std::string& name, ModelId model, int gpu_count, int64_t cpu_milli, int64_t memory_mib);

}  // namespace cnlab::model
