// What a run leaves free and why, averaged over the seeds: leftovers.csv and a section of
// summary.md. Allocation numbers say how well a policy packs; these say what stopped it.
#pragma once

#include <string>

#include "sim/alloc_experiment.h"

namespace cnlab::sim {

// `workload,policy,seeds,measure,key,mean`: per (workload, policy) the free capacity at the end in
// % of the cluster (measures free_on_partly_used_gpus, free_behind_used_up_cpu, free_idle_elsewhere;
// empty key), and, keyed by milli, partly_used_gpus_by_free (GPU count), arrived_by_milli and
// placed_by_milli (pod counts).
std::string leftovers_csv(const ExperimentResult& result);

// Per workload a table: policy, free capacity at the end split three ways, and the leftover
// amounts that the most GPUs hold.
std::string leftovers_markdown(const ExperimentResult& result);

}  // namespace cnlab::sim
