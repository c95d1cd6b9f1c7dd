#include "sim/policies/cnlab_policy.h"

#include <fmt/format.h>

namespace cnlab::sim {

Status CnlabPolicy::catalog_models(const AllocCluster& cluster, std::string_view label) {
  // The scheduler knows GPUs by catalog model (memory, MIG profiles); the baselines need only names.
  for (NodeIndex n = 0; n < cluster.node_count(); ++n) {
    if (cluster.gpu_count(n) == 0) continue;
    const std::string& name = cluster.model_names()[static_cast<size_t>(cluster.model(n))];
    if (!model::find_model(name)) {
      return Error::invalid_argument(fmt::format("{}: node {}: model", label, cluster.node_name(n)), name,
                                     fmt::format("not in the GPU catalog; known models: {}", model::model_names()));
    }
  }
  return {};
}

Status CnlabPolicy::accepts(const AllocCluster& cluster) const {
  return catalog_models(cluster, "nodes (the CNLab policy needs catalog models; the baselines do not)");
}

std::vector<model::Node> CnlabPolicy::nodes_of(const AllocCluster& cluster) {
  std::vector<model::ModelId> model_ids;
  for (const std::string& name : cluster.model_names()) {
    auto id = model::find_model(name);
    CNLAB_CHECK_MSG(id.has_value(), "trace model " + name + " is not in the GPU catalog");
    model_ids.push_back(*id);
  }
  std::vector<model::Node> nodes(cluster.node_count());
  for (NodeIndex n = 0; n < cluster.node_count(); ++n) {
    model::Node& node = nodes[n];
    node.meta.name = std::string(cluster.node_name(n));
    node.cpu_milli = cluster.cpu_capacity(n);
    node.memory_mib = cluster.memory_capacity(n);
    node.simulated = true;
    for (int g = 0; g < cluster.gpu_count(n); ++g) {
      model::ModelId m = model_ids[cluster.model(n)];
      node.gpus.push_back(
          {g, node.meta.name + "-gpu" + std::to_string(g), m, model::gpu_model(m).memory_mib, true, false, {}});
    }
  }
  return nodes;
}

model::JobSpec CnlabPolicy::spec_of(const Pod& pod, const AllocCluster& cluster) {
  model::JobSpec spec;
  spec.project = "trace";
  spec.user = "trace";
  spec.cpu_milli = pod.cpu_milli;
  spec.memory_mib = pod.memory_mib;
  model::SliceRequest& gpu = spec.gpu;
  switch (pod.kind()) {
    case PodKind::kCpuOnly: gpu = {model::SliceKind::kNone, 0, 0, 0, -1, std::nullopt}; break;
    case PodKind::kSharing:
      gpu.kind = model::SliceKind::kBlocks;
      gpu.blocks = (pod.gpu_milli + 9) / 10;  // 1 block = 10 milli; rounding up never over-grants
      break;
    case PodKind::kWholeGpu:
      gpu.kind = model::SliceKind::kWhole;
      gpu.gpu_count = pod.num_gpu;
      break;
  }
  if (pod.allowed_models != kAnyModel && pod.kind() != PodKind::kCpuOnly) {
    for (size_t m = 0; m < cluster.model_names().size(); ++m) {
      if ((pod.allowed_models >> m) & 1) gpu.models |= model::model_bit(*model::find_model(cluster.model_names()[m]));
    }
    // A spec naming only models the cluster lacks fits nowhere; keep it so (no node has bit 31).
    if (gpu.models == 0) gpu.models = model::ModelMask{1} << 31;
  }
  return spec;
}

void CnlabPolicy::reset(const AllocCluster& cluster, const RunContext& context) {
  (void)context;
  cluster_ = &cluster;
  placer_ = std::make_unique<sched::Placer>(nodes_of(cluster), config_);
  next_job_ = 0;
  placement_jobs_.clear();
}

void CnlabPolicy::on_arrival(const Pod& pod) { placer_->observe(spec_of(pod, *cluster_)); }

namespace {
std::optional<Choice> choice_of(const std::optional<std::vector<sched::NodeGrant>>& grants) {
  if (!grants) return std::nullopt;
  CNLAB_CHECK(grants->size() == 1);
  Choice choice{(*grants)[0].node, 0};
  for (const sched::GpuGrant& g : (*grants)[0].gpus) choice.gpus |= uint32_t{1} << g.gpu;
  return choice;
}
}  // namespace

std::optional<Choice> CnlabPolicy::place(const Pod& pod, const AllocCluster& cluster,
                                         std::span<const NodeIndex> feasible) {
  (void)feasible;  // the scheduler applies the same filter itself
  last_job_ = next_job_++;
  return choice_of(placer_->place(spec_of(pod, cluster), last_job_));
}

std::optional<Choice> CnlabPolicy::place_on(const Pod& pod, const AllocCluster& cluster, NodeIndex node) {
  last_job_ = next_job_++;
  return choice_of(placer_->place_on(spec_of(pod, cluster), node, last_job_));
}

bool CnlabPolicy::place_at(const Pod& pod, const AllocCluster& cluster, const Choice& choice) {
  last_job_ = next_job_++;
  auto got = choice_of(placer_->place_at(spec_of(pod, cluster), choice.node, choice.gpus, last_job_));
  CNLAB_CHECK_MSG(!got || (got->node == choice.node && got->gpus == choice.gpus), "place_at took other GPUs");
  return got.has_value();
}

void CnlabPolicy::on_placed(const Pod& pod, const Choice& choice) {
  (void)pod;
  (void)choice;
  placement_jobs_.push_back(last_job_);
}

void CnlabPolicy::on_released(uint32_t placement) { placer_->release(placement_jobs_.at(placement)); }

void CnlabPolicy::on_restored(uint32_t placement) { placer_->restore(placement_jobs_.at(placement)); }

}  // namespace cnlab::sim
