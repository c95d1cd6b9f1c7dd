// CNLab: the production scheduler's placement (src/sched, through sched::Placer), unchanged. This
// file only translates: the experiment's nodes into model::Node, each pod into a model::JobSpec
// (gpu_milli in 1% blocks, whole GPUs, or no GPU), and the grant back into a Choice. It learns the
// workload's shape from the pods as they arrive, never from the trace.
#pragma once

#include <memory>
#include <vector>

#include "model/model.h"
#include "sched/scheduler.h"
#include "sim/alloc_policy.h"

namespace cnlab::sim {

class CnlabPolicy : public AllocPolicy {
 public:
  CnlabPolicy() : config_(scheduler_config()) {}

  // The production defaults, but for the experiment's rule that a pod's GPUs are on one node.
  static sched::PolicyConfig scheduler_config() {
    sched::PolicyConfig config;
    config.gangs_span_nodes = false;
    return config;
  }

  std::string_view name() const override { return "CNLab"; }
  // Every GPU model of the cluster must be in the catalog.
  Status accepts(const AllocCluster& cluster) const override;
  void reset(const AllocCluster& cluster, const RunContext& context) override;
  void on_arrival(const Pod& pod) override;
  std::optional<Choice> place(const Pod& pod, const AllocCluster& cluster,
                              std::span<const NodeIndex> feasible) override;
  void on_placed(const Pod& pod, const Choice& choice) override;
  void on_released(uint32_t placement) override;
  void on_restored(uint32_t placement) override;
  std::optional<Choice> place_on(const Pod& pod, const AllocCluster& cluster, NodeIndex node) override;
  bool place_at(const Pod& pod, const AllocCluster& cluster, const Choice& choice) override;

  // Fails naming the first node whose GPU model is not in the catalog; `label` names the node list.
  static Status catalog_models(const AllocCluster& cluster, std::string_view label);
  // The translations, public so tests can build the same snapshot for sched::run_cycle. nodes_of
  // needs a cluster catalog_models accepts.
  static std::vector<model::Node> nodes_of(const AllocCluster& cluster);
  static model::JobSpec spec_of(const Pod& pod, const AllocCluster& cluster);

 private:
  sched::PolicyConfig config_;
  std::unique_ptr<sched::Placer> placer_;
  const AllocCluster* cluster_ = nullptr;
  sched::JobIndex next_job_ = 0;
  sched::JobIndex last_job_ = 0;                 // the job index of the latest place()
  std::vector<sched::JobIndex> placement_jobs_;  // placement number -> its job in the placer
};

}  // namespace cnlab::sim
