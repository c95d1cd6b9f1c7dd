#include "model/gpu_catalog.h"

#include <algorithm>
#include <array>
#include <vector>

#include "common/strings.h"

namespace cnlab::model {
namespace {

constexpr int64_t gib(int64_t n) { return n * 1024; }

// NVIDIA's start slots per profile shape (A100/H100/H200 share the geometry).
constexpr uint8_t kStarts1g = 0b0111'1111;        // 0..6
constexpr uint8_t kStarts1gDouble = 0b0101'0101;  // 0, 2, 4, 6
constexpr uint8_t kStarts2g = 0b0001'0101;        // 0, 2, 4
constexpr uint8_t kStarts3g = 0b0001'0001;        // 0, 4
constexpr uint8_t kStartsAt0 = 0b0000'0001;       // 0 (4g and 7g)

// Profile memory as NVIDIA names it, in GiB (the agent reports exact sizes from NVML).
constexpr std::array<MigProfile, 6> mig_family(std::string_view p1, int64_t m1, std::string_view p1d, int64_t m1d,
                                               std::string_view p2, std::string_view p3, int64_t m3,
                                               std::string_view p4, std::string_view p7, int64_t m7) {
  return {{
      {p1, 1, 1, gib(m1), kStarts1g},
      {p1d, 1, 2, gib(m1d), kStarts1gDouble},
      {p2, 2, 2, gib(m1d), kStarts2g},
      {p3, 3, 4, gib(m3), kStarts3g},
      {p4, 4, 4, gib(m3), kStartsAt0},
      {p7, 7, 8, gib(m7), kStartsAt0},
  }};
}

constexpr auto kMigA100m40 = mig_family("1g.5gb", 5, "1g.10gb", 10, "2g.10gb", "3g.20gb", 20, "4g.20gb", "7g.40gb", 40);
constexpr auto kMig80 = mig_family("1g.10gb", 10, "1g.20gb", 20, "2g.20gb", "3g.40gb", 40, "4g.40gb", "7g.80gb", 80);
constexpr auto kMigH100nvl =
    mig_family("1g.12gb", 12, "1g.24gb", 24, "2g.24gb", "3g.47gb", 47, "4g.47gb", "7g.94gb", 94);
constexpr auto kMigH200 =
    mig_family("1g.18gb", 18, "1g.35gb", 35, "2g.35gb", "3g.71gb", 71, "4g.71gb", "7g.141gb", 141);

// Sorted by name so that listings read alphabetically. The trace models (p100 .. v100m32, g1..g3)
// come from the Alibaba openb trace; g1..g3 are codes whose hardware was not disclosed.
const std::array kModels = {
    GpuModel{"a10", "NVIDIA A10", Vendor::kNvidia, gib(24), 72, {}},
    GpuModel{"a100m40", "NVIDIA A100 SXM4 40GB", Vendor::kNvidia, gib(40), 108, kMigA100m40},
    GpuModel{"a100m80", "NVIDIA A100 SXM4 80GB", Vendor::kNvidia, gib(80), 108, kMig80},
    GpuModel{"g1", "undisclosed model G1", Vendor::kUndisclosed, 0, 0, {}},
    GpuModel{"g2", "undisclosed model G2", Vendor::kUndisclosed, 0, 0, {}},
    GpuModel{"g3", "undisclosed model G3", Vendor::kUndisclosed, 0, 0, {}},
    GpuModel{"h100", "NVIDIA H100 SXM5 80GB", Vendor::kNvidia, gib(80), 132, kMig80},
    GpuModel{"h100nvl", "NVIDIA H100 NVL 94GB", Vendor::kNvidia, gib(94), 132, kMigH100nvl},
    GpuModel{"h200", "NVIDIA H200 141GB", Vendor::kNvidia, gib(141), 132, kMigH200},
    GpuModel{"l4", "NVIDIA L4 24GB", Vendor::kNvidia, gib(24), 58, {}},
    GpuModel{"l40s", "NVIDIA L40S 48GB", Vendor::kNvidia, gib(48), 142, {}},
    GpuModel{"mi250x", "AMD Instinct MI250X 128GB", Vendor::kAmd, gib(128), 220, {}},
    GpuModel{"mi300x", "AMD Instinct MI300X 192GB", Vendor::kAmd, gib(192), 304, {}},
    GpuModel{"p100", "NVIDIA Tesla P100 16GB", Vendor::kNvidia, gib(16), 56, {}},
    GpuModel{"rtx6000ada", "NVIDIA RTX 6000 Ada 48GB", Vendor::kNvidia, gib(48), 142, {}},
    GpuModel{"t4", "NVIDIA T4 16GB", Vendor::kNvidia, gib(16), 40, {}},
    GpuModel{"v100m16", "NVIDIA V100 16GB", Vendor::kNvidia, gib(16), 80, {}},
    GpuModel{"v100m32", "NVIDIA V100 32GB", Vendor::kNvidia, gib(32), 80, {}},
};
static_assert(kModels.size() <= kMaxModels);

}  // namespace

int MigProfile::max_instances() const {
  int count = 0, next_free = 0;
  for (int slot = 0; slot < kMigMemorySlots; ++slot) {
    if (slot >= next_free && may_start_at(slot) && slot + memory_slots <= kMigMemorySlots) {
      ++count;
      next_free = slot + memory_slots;
    }
  }
  return std::min(count, kMigComputeSlices / compute_slices);
}

std::span<const GpuModel> all_models() { return kModels; }

const GpuModel& gpu_model(ModelId id) {
  CNLAB_CHECK(id < kModels.size());
  return kModels[id];
}

std::optional<ModelId> find_model(std::string_view name) {
  std::string lower = to_lower(name);
  for (size_t i = 0; i < kModels.size(); ++i) {
    if (kModels[i].name == lower) return static_cast<ModelId>(i);
  }
  return std::nullopt;
}

std::string model_names() {
  std::vector<std::string> names;
  for (const auto& m : kModels) names.emplace_back(m.name);
  return join(names, ", ");
}

Result<ModelId> parse_model(std::string_view name, std::string_view field) {
  if (auto id = find_model(name)) return *id;
  return Error::invalid_argument(std::string(field), std::string(name),
                                 "unknown GPU model \"" + std::string(name) + "\"; known models: " + model_names());
}

Result<int> parse_mig_profile(ModelId model, std::string_view profile, std::string_view field) {
  const GpuModel& m = gpu_model(model);
  std::vector<std::string> names;
  std::string lower = to_lower(profile);
  for (size_t i = 0; i < m.mig_profiles.size(); ++i) {
    if (m.mig_profiles[i].name == lower) return static_cast<int>(i);
    names.emplace_back(m.mig_profiles[i].name);
  }
  if (names.empty()) {
    std::vector<std::string> capable;
    for (const auto& other : kModels) {
      if (other.mig_capable()) capable.emplace_back(other.name);
    }
    return Error::invalid_argument(std::string(field), std::string(profile),
                                   std::string(m.name) + " does not support MIG; MIG-capable models: " +
                                       join(capable, ", "));
  }
  return Error::invalid_argument(std::string(field), std::string(profile),
                                 "unknown MIG profile \"" + std::string(profile) + "\" for " + std::string(m.name) +
                                     "; its profiles: " + join(names, ", "));
}

std::string format_model_mask(ModelMask mask) {
  if (mask == 0) return "any";
  std::vector<std::string> names;
  for (size_t i = 0; i < kModels.size(); ++i) {
    if (mask & model_bit(static_cast<ModelId>(i))) names.emplace_back(kModels[i].name);
  }
  return join(names, "|");
}

}  // namespace cnlab::model
