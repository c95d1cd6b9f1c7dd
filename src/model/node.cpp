#include "model/node.h"

#include <fmt/format.h>

namespace cnlab::model {
namespace {

constexpr std::pair<NodePhase, std::string_view> kPhases[] = {
    {NodePhase::kReady, "Ready"}, {NodePhase::kDraining, "Draining"}, {NodePhase::kDown, "Down"}};

Gpu read_gpu(JsonReader& r) {
  r.only({"index", "uuid", "model", "memory_mib", "healthy", "mig_enabled", "mig_instances"});
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

}  // namespace

std::string_view to_string(NodePhase phase) {
  for (auto [value, name] : kPhases) {
    if (value == phase) return name;
  }
  return "Unknown";
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
  return Status::ok();
}

Json to_json(const Node& node) {
  Json gpus = Json::array();
  for (const auto& gpu : node.gpus) {
    Json g = {{"index", gpu.index},       {"uuid", gpu.uuid},       {"model", gpu_model(gpu.model).name},
              {"memory_mib", gpu.memory_mib}, {"healthy", gpu.healthy}, {"mig_enabled", gpu.mig_enabled}};
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
  return {{"kind", "Node"},
          {"metadata", to_json(node.meta)},
          {"spec", {{"unschedulable", node.unschedulable}}},
          {"status", std::move(status)}};
}

Result<Node> node_from_json(const Json& json) {
  auto parts = read_object(json, "Node");
  if (!parts) return parts.error();
  Node node;
  node.meta = std::move(parts->meta);

  JsonReader s(*parts->spec, "spec");
  s.only({"unschedulable"});
  node.unschedulable = s.boolean_or("unschedulable", false);
  if (!s.status()) return s.status().error();

  JsonReader st(*parts->status, "status");
  st.only({"phase", "cpu_milli", "memory_mib", "simulated", "gpus", "idle_since", "last_heartbeat"});
  std::string phase = st.string_or("phase", "Ready");
  bool known = false;
  for (auto [value, name] : kPhases) {
    if (name == phase) {
      node.phase = value;
      known = true;
    }
  }
  if (!known) st.fail(Error::invalid_argument("status.phase", phase, "known phases: Ready, Draining, Down"));
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
  if (!st.status()) return st.status().error();
  if (auto valid = validate(node); !valid) return valid.error();
  return node;
}

}  // namespace cnlab::model
