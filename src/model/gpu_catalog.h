// The GPU models CNLab knows: memory, SM count, and the MIG profiles with NVIDIA's placement rules.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/result.h"

namespace cnlab::model {

// Index of a model in the catalog; stable within one build, used by the scheduler for speed.
using ModelId = uint8_t;
// A set of models, one bit per ModelId; 0 means "any model".
using ModelMask = uint32_t;

enum class Vendor : uint8_t { kNvidia, kAmd, kUndisclosed };

// Memory is split into 8 slots and compute into 7 slices on every MIG-capable GPU. A profile takes
// `memory_slots` contiguous slots and may start only at the slots in `start_mask` (bit i = slot i).
inline constexpr int kMigMemorySlots = 8;
inline constexpr int kMigComputeSlices = 7;
inline constexpr int kBlocksPerGpu = 100;

struct MigProfile {
  std::string_view name;  // "3g.40gb"
  int compute_slices;     // the "3" of 3g
  int memory_slots;       // of kMigMemorySlots
  int64_t memory_mib;
  uint8_t start_mask;

  // 1% blocks the instance holds: its share of the GPU's compute (a 1g instance holds 14).
  int blocks() const { return compute_slices * kBlocksPerGpu / kMigComputeSlices; }
  bool may_start_at(int slot) const { return slot >= 0 && slot < kMigMemorySlots && (start_mask >> slot & 1); }
  // How many instances of this profile alone fit on one GPU (1g.10gb -> 7).
  int max_instances() const;
};

struct GpuModel {
  std::string_view name;     // the name in requests: "h100"
  std::string_view product;  // "NVIDIA H100 SXM5 80GB"
  Vendor vendor;
  int64_t memory_mib;  // 0 when undisclosed
  int sm_count;        // compute units; 0 when undisclosed
  std::span<const MigProfile> mig_profiles;

  bool mig_capable() const { return !mig_profiles.empty(); }
  bool memory_known() const { return memory_mib > 0; }
};

inline constexpr int kMaxModels = 32;  // ModelMask has one bit per model

std::span<const GpuModel> all_models();
const GpuModel& gpu_model(ModelId id);
std::optional<ModelId> find_model(std::string_view name);  // case-insensitive
// Like find_model, with an error that lists the catalog's names.
Result<ModelId> parse_model(std::string_view name, std::string_view field);
// The index of `profile` in the model's list, or an error listing the model's profiles.
Result<int> parse_mig_profile(ModelId model, std::string_view profile, std::string_view field);

inline constexpr ModelMask model_bit(ModelId id) { return ModelMask{1} << id; }
inline bool mask_allows(ModelMask mask, ModelId id) { return mask == 0 || (mask & model_bit(id)) != 0; }
// "h100", "v100m16|v100m32" in catalog order, "any" for an empty mask.
std::string format_model_mask(ModelMask mask);
// "a100m40, a100m80, ..." for error messages.
std::string model_names();

}  // namespace cnlab::model
