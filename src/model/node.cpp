#include "model/node.h"

#include <fmt/format.h>

#include "model/decode.h"

namespace cnlab::model {
namespace {

constexpr std::pair<NodePhase, std::string_view> kPhases[] = {
    {NodePhase::kReady, "Ready"},       {NodePhase::kNotReady, "NotReady"}, {NodePhase::kLost, "Lost"},
    {NodePhase::kCordoned, "Cordoned"}, {NodePhase::kDraining, "Draining"},
};

constexpr size_t kMaxConditionText = 4096;

Gpu read_gpu(JsonReader& r) {
  // allocated_*: what the server adds to a GPU in its answers (from the allocation records); taken
  // and ignored, so that a node read from the API decodes again.
  r.only({"index", "uuid", "model", "memory_mib", "healthy", "mig_enabled", "mig_instances", "simulated",
          "allocated_blocks", "allocated_vram_mib", "allocated_jobs"});
  Gpu gpu;
  gpu.index = static_cast<int>(r.integer_or("index", 0, 0, 1023));
  gpu.uuid = r.string_or("uuid", "");
  std::string model = r.string("model");
  if (r.status()) {
    auto id = parse_model(model, r.path_of("model"));
    if (!id) {
      r.fail(id.error());
      return gpu;
    }
    gpu.model = *id;
  }
  gpu.memory_mib = r.integer_or("memory_mib", gpu_model(gpu.model).memory_mib, 0, int64_t{1} << 30);
  gpu.healthy = r.boolean_or("healthy", true);
  gpu.mig_enabled = r.boolean_or("mig_enabled", false);
  gpu.simulated = r.boolean_or("simulated", false);
  if (const Json* instances = r.array("mig_instances")) {
    for (size_t i = 0; i < instances->size(); ++i) {
      JsonReader ir((*instances)[i], fmt::format("{}[{}]", r.path_of("mig_instances"), i));
      ir.only({"profile", "start"});
      std::string profile = ir.string("profile");
      int start = static_cast<int>(ir.integer_or("start", 0, 0, kMigMemorySlots - 1));
      if (ir.status()) {
        auto p = parse_mig_profile(gpu.model, profile, ir.path_of("profile"));
        if (p) gpu.mig_instances.push_back({*p, start});
        else ir.fail(p.error());
      }
      if (!ir.status()) r.fail(ir.status().error());
    }
  }
  return gpu;
}

NodeCondition read_condition(JsonReader& r) {
  r.only({"type", "status", "reason", "message", "last_transition"});
  NodeCondition condition;
  condition.type = r.string("type");
  if (!r.has("status")) r.fail(Error::invalid_argument(r.path_of("status"), "", "required field is missing"));
  condition.status = r.boolean_or("status", false);
  condition.reason = detail::bounded_string(r, "reason", kMaxConditionText);
  condition.message = detail::bounded_string(r, "message", kMaxConditionText);
  condition.last_transition = r.time("last_transition");
  return condition;
}

bool is_camel_word(std::string_view text) {
  auto letter = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); };
  bool ok = !text.empty() && text.size() <= 63 && text.front() >= 'A' && text.front() <= 'Z';
  for (char c : text) ok = ok && (letter(c) || (c >= '0' && c <= '9'));
  return ok;
}

}  // namespace

std::string_view to_string(NodePhase phase) { return detail::name_of(kPhases, phase); }

std::optional<NodePhase> parse_node_phase(std::string_view name) { return detail::find_by_name(kPhases, name); }

Node simulated_node(const std::string& name, ModelId model, int gpu_count, int64_t cpu_milli, int64_t memory_mib) {
  Node node;
  node.meta.name = name;
  node.cpu_milli = cpu_milli;
  node.memory_mib = memory_mib;
  node.simulated = true;
  for (int i = 0; i < gpu_count; ++i) {
    Gpu g;
    g.index = i;
    g.uuid = "GPU-" + name + "-" + std::to_string(i);
    g.model = model;
    g.memory_mib = gpu_model(model).memory_mib;
    g.simulated = true;
    node.gpus.push_back(std::move(g));
  }
  return node;
}

Status validate(const Node& node) {
  if (auto s = validate_name(node.meta.name, "metadata.name"); !s) return s;
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    const Gpu& gpu = node.gpus[i];
    std::string path = fmt::format("status.gpus[{}]", i);
    if (gpu.index != static_cast<int>(i)) {
      return Error::invalid_argument(path + ".index", std::to_string(gpu.index),
                                     fmt::format("GPUs must be listed by index 0..{}", node.gpus.size() - 1));
    }
    if (gpu.model >= all_models().size()) {
      return Error::invalid_argument(path + ".model", std::to_string(gpu.model), "unknown model id");
    }
    if (!gpu.mig_enabled && !gpu.mig_instances.empty()) {
      return Error::invalid_argument(path + ".mig_instances", MigLayout::create(gpu.model, {}).value().to_string(),
                                     "MIG instances need mig_enabled: true");
    }
    if (gpu.mig_enabled) {
      if (!gpu_model(gpu.model).mig_capable()) {
        return Error::invalid_argument(path + ".mig_enabled", "true",
                                       std::string(gpu_model(gpu.model).name) + " does not support MIG");
      }
      auto layout = MigLayout::create(gpu.model, gpu.mig_instances);
      if (!layout) {
        return Error::invalid_argument(path + "." + layout.error().field, layout.error().value, layout.error().message);
      }
    }
  }
  for (size_t i = 0; i < node.conditions.size(); ++i) {
    const NodeCondition& c = node.conditions[i];
    std::string path = fmt::format("status.conditions[{}]", i);
    if (!is_camel_word(c.type)) {
      return Error::invalid_argument(path + ".type", c.type,
                                     "condition types are 1..63 letters and digits starting with a capital letter, "
                                     "such as GpuHealthy");
    }
    for (size_t k = 0; k < i; ++k) {
      if (node.conditions[k].type == c.type) {
        return Error::invalid_argument(path + ".type", c.type,
                                       fmt::format("repeats status.conditions[{}]; each type appears once", k));
      }
    }
  }
  return Status::ok();
}

Json to_json(const Node& node) {
  Json gpus = Json::array();
  for (const auto& gpu : node.gpus) {
    Json g = {{"index", gpu.index},           {"uuid", gpu.uuid},       {"model", gpu_model(gpu.model).name},
              {"memory_mib", gpu.memory_mib}, {"healthy", gpu.healthy}, {"mig_enabled", gpu.mig_enabled},
              {"simulated", gpu.simulated}};
    if (gpu.mig_enabled) {
      Json instances = Json::array();
      for (const auto& instance : gpu.mig_instances) {
        instances.push_back(
            {{"profile", gpu_model(gpu.model).mig_profiles[instance.profile].name}, {"start", instance.start}});
      }
      g["mig_instances"] = std::move(instances);
    }
    gpus.push_back(std::move(g));
  }
  Json status = {{"phase", to_string(node.phase)},
                 {"cpu_milli", node.cpu_milli},
                 {"memory_mib", node.memory_mib},
                 {"simulated", node.simulated},
                 {"gpus", std::move(gpus)}};
  if (node.idle_since) status["idle_since"] = format_rfc3339(*node.idle_since);
  if (node.last_heartbeat) status["last_heartbeat"] = format_rfc3339(*node.last_heartbeat);
  if (!node.conditions.empty()) {
    Json conditions = Json::array();
    for (const auto& c : node.conditions) {
      Json cj = {{"type", c.type}, {"status", c.status}};
      if (!c.reason.empty()) cj["reason"] = c.reason;
      if (!c.message.empty()) cj["message"] = c.message;
      if (c.last_transition) cj["last_transition"] = format_rfc3339(*c.last_transition);
      conditions.push_back(std::move(cj));
    }
    status["conditions"] = std::move(conditions);
  }
  if (!node.agent_version.empty()) status["agent_version"] = node.agent_version;
  if (!node.address.empty()) status["address"] = node.address;
  if (!node.peer_address.empty()) status["peer_address"] = node.peer_address;
  if (node.gpu_checkpoint) status["gpu_checkpoint"] = true;
  if (node.power_down_candidate) status["power_down_candidate"] = true;
  return {{"kind", "Node"},
          {"metadata", to_json(node.meta)},
          {"spec", node.drain_requeues ? Json{{"unschedulable", node.unschedulable}, {"drain_requeues", true}}
                                       : Json{{"unschedulable", node.unschedulable}}},
          {"status", std::move(status)}};
}

Result<Node> node_from_json(const Json& json) {
  auto parts = read_object(json, "Node");
  if (!parts) return parts.error();
  Node node;
  node.meta = std::move(parts->meta);

  JsonReader s(*parts->spec, "spec");
  s.only({"unschedulable", "drain_requeues"});
  node.unschedulable = s.boolean_or("unschedulable", false);
  node.drain_requeues = s.boolean_or("drain_requeues", false);
  if (!s.status()) return s.status().error();

  JsonReader st(*parts->status, "status");
  // bound_jobs: what the server adds in its answers, like a GPU's allocated_*; taken and ignored.
  st.only({"phase", "cpu_milli", "memory_mib", "simulated", "gpus", "idle_since", "last_heartbeat", "conditions",
           "agent_version", "address", "peer_address", "gpu_checkpoint", "power_down_candidate", "bound_jobs"});
  node.phase = detail::read_enum(st, "phase", kPhases, NodePhase::kReady, "phases");
  node.cpu_milli = st.integer_or("cpu_milli", 0, 0, int64_t{1} << 40);
  node.memory_mib = st.integer_or("memory_mib", 0, 0, int64_t{1} << 40);
  node.simulated = st.boolean_or("simulated", false);
  node.idle_since = st.time("idle_since");
  node.last_heartbeat = st.time("last_heartbeat");
  if (const Json* gpus = st.array("gpus")) {
    for (size_t i = 0; i < gpus->size() && st.status(); ++i) {
      JsonReader g((*gpus)[i], fmt::format("status.gpus[{}]", i));
      node.gpus.push_back(read_gpu(g));
      if (!g.status()) st.fail(g.status().error());
    }
  }
  if (const Json* conditions = st.array("conditions")) {
    for (size_t i = 0; i < conditions->size() && st.status(); ++i) {
      JsonReader c((*conditions)[i], fmt::format("status.conditions[{}]", i));
      node.conditions.push_back(read_condition(c));
      if (!c.status()) st.fail(c.status().error());
    }
  }
  node.agent_version = detail::bounded_string(st, "agent_version", 256);
  node.address = detail::bounded_string(st, "address", 1024);
  node.peer_address = detail::bounded_string(st, "peer_address", 1024);
  node.gpu_checkpoint = st.boolean_or("gpu_checkpoint", false);
  node.power_down_candidate = st.boolean_or("power_down_candidate", false);
  if (!st.status()) return st.status().error();
  if (auto valid = validate(node); !valid) return valid.error();
  return node;
}

}  // namespace cnlab::model
