// Migrations in the allocation experiment (`cnlab sim alloc --migrations`): when a GPU pod fits
// nowhere, placed pods move so that it fits. Defragmentation the way a scheduler with live
// migration can do it, in two bounded steps: first a few pods smaller than the one that needs the
// room move off one node into holes elsewhere (sharing pods off GPUs, CPU-only pods off hosts, at
// most `max_moves`); failing that, a re-pack of a small set of GPUs around the pod (moves into
// holes, chains and swaps in one sub-problem; one-GPU whole pods only for a gang; at most
// `repack_moves`). A move that cannot be completed is undone, so no pod that was placed is lost;
// every pod that changes GPU counts as a move.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "sim/alloc_cluster.h"
#include "sim/alloc_policy.h"

namespace cnlab::sim {

struct MigrationLimits {
  int max_moves = 4;         // pods moved to make room for one pod (single-level moves)
  int candidate_nodes = 8;   // nodes tried, cheapest first, before giving up on a pod
  // Re-pack, when no single-level move makes room: the sharing pods on the GPU(s) the pod could
  // take and on the `repack_pool` GPUs with the most free milli elsewhere (and the target node's
  // other GPUs) come off together and are placed again, largest first, with the pod that needs the
  // room: moves into holes, chains (a pod moves to make room for a moved one) and swaps in one
  // exact sub-problem. Accepted only when everything fits and at most `repack_moves` pods change
  // GPU; `repack_targets` places for the pod are tried. 0 turns re-packing off.
  int repack_targets = 8;
  int repack_pool = 24;
  int repack_moves = 8;
};

// The pods placed so far, as the engine applied them, by placement number (the order of on_placed
// calls), and which are on each node now.
class Placements {
 public:
  explicit Placements(size_t nodes) : on_node_(nodes) {}
  // Records a placement; returns its number.
  uint32_t add(const Pod& pod, const Choice& choice);
  // It left (moved away): no longer on its node.
  void remove(uint32_t placement);
  // Back where it was (an undone move).
  void restore(uint32_t placement);
  const Pod& pod(uint32_t placement) const { return all_[placement].pod; }
  const Choice& choice(uint32_t placement) const { return all_[placement].choice; }
  const std::vector<uint32_t>& on_node(NodeIndex n) const { return on_node_[n]; }

 private:
  struct Entry {
    Pod pod;
    Choice choice;
  };
  std::vector<Entry> all_;
  std::vector<std::vector<uint32_t>> on_node_;
};

// Tries to make room for `pod` (which fits nowhere now) by moving placed pods, and places it:
// single-level moves first, then a re-pack (MigrationLimits).
// Returns how many pods moved (the pod is then applied and recorded), or nullopt when no move
// within `limits` makes room (nothing changed). Placement numbers are kept in step with the
// policy's (every apply goes with on_placed, every move with on_released / on_restored).
std::optional<int> migrate_to_place(const Pod& pod, AllocCluster& cluster, AllocPolicy& policy, Placements& placements,
                                    const MigrationLimits& limits);

}  // namespace cnlab::sim
