// The face of src/agent/gpu: what the rest of the agent includes.
//   GpuBackend      the node's GPUs (inventory, usage, health) and the MIG primitives
//   NvmlBackend     real GPUs through a dlopen'd libnvidia-ml.so.1
//   SimulatedBackend  `--simulate-gpus h100x8,l4x2`, with fault injection
//   MigManager      applies the MIG layout the scheduler decided
#pragma once

#include "agent/gpu/gpu_backend.h"
#include "agent/gpu/mig_manager.h"
#include "agent/gpu/nvml_backend.h"
#include "agent/gpu/simulated_backend.h"
