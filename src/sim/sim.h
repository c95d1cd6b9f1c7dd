// The face of src/sim, the trace-driven simulator: what other modules and main may use.
#pragma once

#include "sim/alloc_cluster.h"
#include "sim/alloc_experiment.h"
#include "sim/alloc_policy.h"
#include "sim/alloc_report.h"
#include "sim/alloc_run.h"
#include "sim/alloc_workload.h"
#include "sim/generic_trace.h"
#include "sim/openb_trace.h"
#include "sim/policy_registry.h"
#include "sim/sim_command.h"
#include "sim/typical_pods.h"
