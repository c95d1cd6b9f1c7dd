// A hand-written SVG of the allocation curves: one panel per workload, allocation (%) against
// arrived GPU demand (% of capacity), one line per policy, with axes, labels and a legend.
#pragma once

#include <string>

#include "sim/alloc_experiment.h"

namespace cnlab::sim {

std::string allocation_svg(const ExperimentResult& result);

}  // namespace cnlab::sim
