// Which catalog model a device is, from the name its driver reports. Private to src/agent/gpu.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "model/gpu_catalog.h"

namespace cnlab::agent {

// The catalog model for an NVML device name ("NVIDIA H100 80GB HBM3" -> h100, "Tesla T4" -> t4,
// "NVIDIA A100-SXM4-40GB" -> a100m40), or nullopt for a device the catalog does not have (the
// scheduler could not place work on it). `memory_mib` (0 when unknown) tells apart the sizes of
// one product that NVML names alike (an "NVIDIA A100-PCIE" of 40 or 80 GB, V100 16 or 32 GB).
std::optional<model::ModelId> model_for_device_name(std::string_view name, int64_t memory_mib);

}  // namespace cnlab::agent
