// The replay's baseline: what a plain GPU cluster does (a Kubernetes-like default scheduler with
// the NVIDIA device plugin and no GPU sharing).
//
//  * Order: pending jobs by submit time (then by their index in the snapshot), every cycle. No
//    priority classes, no fair share, no deadlines, no reservations, no pre-emption.
//  * A job that does not fit waits, and later jobs may still start in the same cycle (no
//    head-of-line blocking: there is no reservation that would make the head's wait end).
//  * First fit: the lowest-index node with room, and on it the lowest-index free GPUs.
//  * Whole GPUs only: a fractional request (blocks) gets one whole GPU to itself, a MIG request
//    one whole GPU of its model. A GPU holding any job is not free.
//  * Gangs: on one node; only when the request is larger than every node of an allowed model,
//    free GPUs of that model are gathered node by node in index order, all or nothing, with host
//    CPU and memory split in proportion to the GPUs each node gives (as sched does).
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "sim/replay_policy.h"

namespace cnlab::sim {

class FifoReplayPolicy : public ReplayPolicy {
 public:
  std::string_view name() const override { return "fifo"; }
  sched::CycleResult cycle(const sched::Snapshot& snapshot) override;

 private:
  struct Room {
    int64_t cpu = 0, mem = 0;
    uint32_t gpu_begin = 0, gpu_end = 0;  // into free_
    bool usable = false;
  };

  void index_nodes(const sched::Snapshot& snapshot);
  void load(const sched::Snapshot& snapshot);
  std::optional<std::vector<sched::NodeGrant>> place(const model::JobSpec& spec, const sched::Snapshot& snapshot);
  std::optional<std::vector<sched::NodeGrant>> place_multi(const model::JobSpec& spec, int count,
                                                           const sched::Snapshot& snapshot);
  bool allows(const model::JobSpec& spec, model::ModelId model) const;
  sched::GpuGrant take(const sched::Snapshot& snapshot, uint32_t node, int gpu);

  // Built once per cluster: node name -> index, and where each node's GPUs sit in free_.
  std::unordered_map<std::string, uint32_t> node_index_;
  std::vector<Room> rooms_;
  std::vector<uint8_t> free_;  // one per GPU of the cluster: 1 while free
  std::vector<int> max_per_node_;  // by ModelId: the most GPUs of the model on one node
};

}  // namespace cnlab::sim
