// The replay experiment's cluster, as model::Node values the scheduler reads: from an openb node
// list (translated as the allocation experiment's CNLab policy translates it) or from a spec such
// as `300:h100x8,20:l4x2` (300 nodes of eight H100s and 20 of two L4s).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/common.h"
#include "model/model.h"
#include "sim/openb_trace.h"

namespace cnlab::sim {

// Host resources a --cluster node gets per GPU it has (openb node lists carry their own).
struct HostPerGpu {
  int64_t cpu_milli = 16'000;       // 16 cores
  int64_t memory_mib = 128 * 1024;  // 128 GiB
};

inline constexpr int64_t kMaxClusterNodes = 100'000;

// `COUNT:MODELxGPUS[,COUNT:MODELxGPUS...]`: COUNT 1..kMaxClusterNodes (in all), MODEL a catalog
// name (any case; split at the last 'x', so mi300xx8 is eight MI300X), GPUS 1..kMaxGpusPerNode.
// Nodes are named n00000-h100, n00001-h100, ... in spec order. Errors name `field`, the bad group
// and what is allowed.
Result<std::vector<model::Node>> parse_cluster_spec(std::string_view spec, const HostPerGpu& host,
                                                    std::string_view field = "--cluster");

// The openb node list as nodes; fails naming the node when its model is not in the catalog.
Result<std::vector<model::Node>> nodes_from_openb(const std::vector<OpenbNode>& list, std::string_view label);

// "1,213 nodes, 6,212 GPUs (p100 x 264, t4 x 1,004, ...)" for reports.
std::string describe_cluster(const std::vector<model::Node>& nodes);

}  // namespace cnlab::sim
