#include "model/mig_layout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace cnlab::model {

Result<MigLayout> MigLayout::create(ModelId model, const std::vector<MigInstance>& instances) {
  MigLayout layout(model);
  for (size_t i = 0; i < instances.size(); ++i) {
    if (auto status = layout.add(instances[i].profile, instances[i].start); !status) {
      return Error::invalid_argument(fmt::format("mig_instances[{}]", i), status.error().value,
                                     status.error().message);
    }
  }
  return layout;
}

bool MigLayout::can_add(int profile, int start) const {
  const auto& profiles = gpu_model(model_).mig_profiles;
  if (profile < 0 || profile >= static_cast<int>(profiles.size())) return false;
  const MigProfile& p = profiles[profile];
  if (!p.may_start_at(start) || start + p.memory_slots > kMigMemorySlots) return false;
  if (used_slots_ & slot_bits(start, p.memory_slots)) return false;
  return used_compute_ + p.compute_slices <= kMigComputeSlices;
}

int MigLayout::first_fit(int profile) const {
  for (int start = 0; start < kMigMemorySlots; ++start) {
    if (can_add(profile, start)) return start;
  }
  return -1;
}

Status MigLayout::add(int profile, int start) {
  const GpuModel& m = gpu_model(model_);
  if (!m.mig_capable()) {
    return Error::invalid_argument("mig", std::string(m.name), "this model does not support MIG");
  }
  if (profile < 0 || profile >= static_cast<int>(m.mig_profiles.size())) {
    return Error::invalid_argument("profile", std::to_string(profile),
                                   fmt::format("{} has {} MIG profiles", m.name, m.mig_profiles.size()));
  }
  const MigProfile& p = m.mig_profiles[profile];
  std::string where = fmt::format("{}@{}", p.name, start);
  if (!p.may_start_at(start) || start + p.memory_slots > kMigMemorySlots) {
    std::vector<int> allowed;
    for (int s = 0; s < kMigMemorySlots; ++s) {
      if (p.may_start_at(s)) allowed.push_back(s);
    }
    return Error::invalid_argument("instance", where,
                                   fmt::format("{} may start only at slot {}", p.name, fmt::join(allowed, ",")));
  }
  if (used_slots_ & slot_bits(start, p.memory_slots)) {
    return Error::invalid_argument("instance", where,
                                   fmt::format("memory slots {}..{} overlap an existing instance ({})", start,
                                               start + p.memory_slots - 1, to_string()));
  }
  if (used_compute_ + p.compute_slices > kMigComputeSlices) {
    return Error::invalid_argument("instance", where,
                                   fmt::format("needs {} compute slices but only {} of 7 are free", p.compute_slices,
                                               kMigComputeSlices - used_compute_));
  }
  instances_.push_back({profile, start});
  used_slots_ |= slot_bits(start, p.memory_slots);
  used_compute_ += p.compute_slices;
  return Status::ok();
}

bool MigLayout::remove(int start) {
  for (size_t i = 0; i < instances_.size(); ++i) {
    if (instances_[i].start != start) continue;
    const MigProfile& p = gpu_model(model_).mig_profiles[instances_[i].profile];
    used_slots_ &= static_cast<uint8_t>(~slot_bits(start, p.memory_slots));
    used_compute_ -= p.compute_slices;
    instances_.erase(instances_.begin() + static_cast<long>(i));
    return true;
  }
  return false;
}

std::string MigLayout::to_string() const {
  std::string out;
  for (const auto& instance : instances_) {
    if (!out.empty()) out += ',';
    out += fmt::format("{}@{}", gpu_model(model_).mig_profiles[instance.profile].name, instance.start);
  }
  return out.empty() ? "empty" : out;
}

}  // namespace cnlab::model
