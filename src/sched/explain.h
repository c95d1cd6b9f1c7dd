// Human-readable reasons for jobs left waiting. Private to src/sched.
#pragma once

#include <string>

#include "sched/calendar.h"
#include "sched/cluster_state.h"
#include "sched/job_shape.h"
#include "sched/snapshot.h"

namespace cnlab::sched {

// "25 blocks of h100 with 4 CPU cores and 16Gi memory": what a shape asks for, and the node
// traits it needs ("... on a node with real GPUs and NVIDIA's cuda-checkpoint (to resume its
// checkpoint)").
std::string describe_shape(const JobShape& shape);

// Why `shape` (for a job running [now, end)) found no place now: what the cluster has at best
// ("largest free on any h100 is 12 blocks"), or which reservation holds the capacity that fits.
std::string why_no_fit(const ClusterState& state, const Calendar& calendar, const Snapshot& snapshot,
                       const JobShape& shape, Time now, Time end);

// Whether the shape could fit an empty cluster at all; the reason when it never can (empty when it
// can). `span_nodes`: whether gangs may take GPUs of several nodes.
std::string never_fits(const ClusterState& state, const std::vector<model::Node>& nodes, const JobShape& shape,
                       bool span_nodes);

}  // namespace cnlab::sched
