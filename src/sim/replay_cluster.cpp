#include "sim/replay_cluster.h"

#include <fmt/format.h>

#include <map>

#include "sim/alloc_cluster.h"
#include "sim/policies/cnlab_policy.h"

namespace cnlab::sim {
namespace {

constexpr std::string_view kSpecHelp = "expected COUNT:MODELxGPUS[,COUNT:MODELxGPUS...] such as 300:h100x8,20:l4x2";

std::string with_commas(int64_t value) {
  std::string digits = std::to_string(value);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

Result<std::vector<model::Node>> parse_cluster_spec(std::string_view spec, const HostPerGpu& host,
                                                    std::string_view field) {
  auto bad = [&](std::string_view group, std::string why) {
    return Error::invalid_argument(std::string(field), std::string(group), why + "; " + std::string(kSpecHelp));
  };
  if (trim(spec).empty()) return bad(spec, "the cluster spec is empty");
  std::vector<model::Node> nodes;
  for (std::string_view raw : split(spec, ',')) {
    std::string_view group = trim(raw);
    size_t colon = group.find(':');
    if (colon == std::string_view::npos) return bad(group, "missing ':' between COUNT and MODELxGPUS");
    std::string_view count_text = trim(group.substr(0, colon));
    std::string_view shape = trim(group.substr(colon + 1));
    auto count = parse_int(count_text, field);
    if (!count || *count < 1 || *count > kMaxClusterNodes) {
      return bad(group, fmt::format("COUNT \"{}\" must be a whole number 1..{}", count_text, kMaxClusterNodes));
    }
    if (static_cast<int64_t>(nodes.size()) + *count > kMaxClusterNodes) {
      return bad(group, fmt::format("the cluster may have at most {} nodes in all", kMaxClusterNodes));
    }
    // Split at the last 'x': model names may contain one (mi300x, rtx6000ada).
    size_t x = to_lower(shape).rfind('x');
    if (x == std::string_view::npos) return bad(group, "missing 'x' between MODEL and GPUS");
    std::string_view model_text = trim(shape.substr(0, x));
    std::string_view gpus_text = trim(shape.substr(x + 1));
    auto model = model::find_model(model_text);
    if (!model) {
      return bad(group, fmt::format("unknown GPU model \"{}\"; known models: {}", model_text, model::model_names()));
    }
    auto gpus = parse_int(gpus_text, field);
    if (!gpus || *gpus < 1 || *gpus > kMaxGpusPerNode) {
      return bad(group, fmt::format("GPUS \"{}\" must be a whole number 1..{}", gpus_text, kMaxGpusPerNode));
    }
    const model::GpuModel& m = model::gpu_model(*model);
    for (int64_t i = 0; i < *count; ++i) {
      model::Node node;
      node.meta.name = fmt::format("n{:05}-{}", nodes.size(), m.name);
      node.cpu_milli = host.cpu_milli * *gpus;
      node.memory_mib = host.memory_mib * *gpus;
      node.simulated = true;
      for (int g = 0; g < *gpus; ++g) {
        node.gpus.push_back({g, node.meta.name + "-gpu" + std::to_string(g), *model, m.memory_mib, true, false, {}});
      }
      nodes.push_back(std::move(node));
    }
  }
  return nodes;
}

Result<std::vector<model::Node>> nodes_from_openb(const std::vector<OpenbNode>& list, std::string_view label) {
  auto cluster = AllocCluster::build(list);
  if (!cluster) return cluster.error();
  if (auto known = CnlabPolicy::catalog_models(*cluster, label); !known) return known.error();
  return CnlabPolicy::nodes_of(*cluster);
}

std::string describe_cluster(const std::vector<model::Node>& nodes) {
  std::map<std::string_view, int64_t> per_model;
  int64_t gpus = 0;
  for (const model::Node& node : nodes) {
    for (const model::Gpu& gpu : node.gpus) ++per_model[model::gpu_model(gpu.model).name];
    gpus += static_cast<int64_t>(node.gpus.size());
  }
  std::vector<std::string> parts;
  for (const auto& [name, count] : per_model) parts.push_back(fmt::format("{} x {}", name, with_commas(count)));
  return fmt::format("{} nodes, {} GPUs ({})", with_commas(static_cast<int64_t>(nodes.size())), with_commas(gpus),
                     join(parts, ", "));
}

}  // namespace cnlab::sim
