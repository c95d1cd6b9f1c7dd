// The placement policy interface of the allocation experiment. The six published baselines
// (src/sim/policies/) implement it, and so can any other policy (CNLab's own placement), without
// a change to the engine.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "common/common.h"
#include "sim/alloc_cluster.h"

namespace cnlab::sim {

// What a policy may know about the run besides the pods it has seen: not the trace.
struct RunContext {
  std::string_view workload;  // e.g. "openb_pod_list_default"
  uint64_t seed = 0;          // for a policy's own randomness (draw it from Rng(seed, stream))
  int tune_percent = 130;     // arrived GPU demand stops near this % of cluster GPU capacity
};

// One instance per run; never shared between threads. The engine calls reset() once, then for each
// pod on_arrival(), then, when the pod fits somewhere, place() and, when it was placed, on_placed().
class AllocPolicy {
 public:
  virtual ~AllocPolicy() = default;

  // The name reports and charts use ("BestFit", "FGD", "CNLab", ...).
  virtual std::string_view name() const = 0;

  // Whether the policy can run on `cluster` at all; the error names what it cannot handle. Asked
  // once before any run, so a bad cluster is refused instead of ending a run half-way.
  virtual Status accepts(const AllocCluster& cluster) const {
    (void)cluster;
    return {};
  }

  // Before the first pod of a run; `cluster` is empty and its ranks are set.
  virtual void reset(const AllocCluster& cluster, const RunContext& context) {
    (void)cluster;
    (void)context;
  }

  // Every pod as it arrives, before the engine looks for a node: placed, failed or CPU-only. A
  // policy that learns the workload's shape online learns it here.
  virtual void on_arrival(const Pod& pod) { (void)pod; }

  // Where `pod` goes. `feasible` lists, in increasing node index, every node that passes the
  // experiment's filter (AllocCluster::fits); it is never empty. Return one of those nodes and the
  // GPUs (see Choice), or nullopt to leave the pod unplaced (it counts as failed). The engine
  // checks the choice and ends the run with an error when it is invalid.
  virtual std::optional<Choice> place(const Pod& pod, const AllocCluster& cluster,
                                      std::span<const NodeIndex> feasible) = 0;

  // After the engine applied `choice` (cluster.version(choice.node) has grown).
  virtual void on_placed(const Pod& pod, const Choice& choice) {
    (void)pod;
    (void)choice;
  }

  // -- Migrations (`--migrations`): the engine may move placed pods to make room for one that fits
  //    nowhere. Placements are numbered in the order of on_placed calls (0, 1, ...).

  // Whether the policy can follow moves (a policy keeping its own view of the cluster must).
  virtual bool supports_migration() const { return true; }
  // Placement `placement` leaves its node (it is moving, or a move is being undone).
  virtual void on_released(uint32_t placement) { (void)placement; }
  // Undoes on_released(placement): it is back exactly where it was (a move that did not work out).
  virtual void on_restored(uint32_t placement) { (void)placement; }
  // Where `pod` goes on node `node` alone, now that a move made room there; nullopt when it still
  // does not fit. By default the policy's own place() with only that node feasible.
  virtual std::optional<Choice> place_on(const Pod& pod, const AllocCluster& cluster, NodeIndex node) {
    NodeIndex only[] = {node};
    return place(pod, cluster, only);
  }
  // Puts `pod` exactly at `choice` (a re-pack planned where every pod goes); the engine applies it
  // and calls on_placed after a true answer. False when the policy cannot follow (the engine then
  // undoes the re-pack). By default true: a policy whose only view is the cluster has nothing to do.
  virtual bool place_at(const Pod& pod, const AllocCluster& cluster, const Choice& choice) {
    (void)pod;
    (void)cluster;
    (void)choice;
    return true;
  }
};

}  // namespace cnlab::sim
