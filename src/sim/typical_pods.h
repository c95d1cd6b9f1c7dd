// FGD's "typical pods": the distribution of pod shapes of the original trace, which the FGD
// policy's fragmentation measure weighs. Only FGD is given it (as in the paper); a policy that
// claims to be online must not be.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sim/alloc_cluster.h"
#include "sim/openb_trace.h"

namespace cnlab::sim {

struct TypicalPod {
  int32_t cpu_milli = 0;
  int32_t gpu_milli = 0;
  int32_t num_gpu = 0;
  std::string gpu_spec;  // joined with '|', "" = any
  ModelMask allowed_models = kAnyModel;
  int64_t count = 0;  // pods of the trace with this shape; its probability is count / kept_pods
};

struct TypicalPods {
  std::vector<TypicalPod> types;  // the kept prefix, most frequent first
  int64_t kept_pods = 0;          // sum of the kept counts
  int64_t total_pods = 0;
  size_t total_types = 0;  // shapes before the cut
};

// Groups every row of `trace` (CPU-only included) by (cpu_milli, gpu_milli, num_gpu, gpu_spec);
// memory is not a key. Sorts the groups by count, descending, ties broken by the larger key first
// (compared in that order, the spec as text), and keeps the shortest prefix covering at least
// `coverage_percent` % of the pods.
TypicalPods typical_pods(std::span<const OpenbPod> trace, const AllocCluster& cluster, int coverage_percent = 95);

}  // namespace cnlab::sim
