// The MIG instances on one GPU. Only layouts NVIDIA would accept can be built: every instance starts
// at a slot its profile allows, no two instances share a memory slot, compute never exceeds 7 slices.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "model/gpu_catalog.h"

namespace cnlab::model {

struct MigInstance {
  int profile = 0;  // index into the model's mig_profiles
  int start = 0;    // first memory slot

  bool operator==(const MigInstance&) const = default;
};

class MigLayout {
 public:
  explicit MigLayout(ModelId model) : model_(model) {}

  // Builds a layout from instances, refusing any NVIDIA would refuse (the error names the instance).
  static Result<MigLayout> create(ModelId model, const std::vector<MigInstance>& instances);

  ModelId model() const { return model_; }
  const std::vector<MigInstance>& instances() const { return instances_; }
  uint8_t used_slots() const { return used_slots_; }
  int used_compute() const { return used_compute_; }

  // Whether `profile` can start at `start` beside the existing instances.
  bool can_add(int profile, int start) const;
  // The lowest start slot where `profile` fits, or -1. Lowest-first keeps the high slots together
  // for the larger profiles that may start only at 0 or 4.
  int first_fit(int profile) const;
  Status add(int profile, int start);
  // Removes the instance starting at `start`; false when there is none.
  bool remove(int start);

  std::string to_string() const;  // "3g.40gb@0,2g.20gb@4"

 private:
  static uint8_t slot_bits(int start, int slots) { return static_cast<uint8_t>(((1u << slots) - 1) << start); }

  ModelId model_;
  std::vector<MigInstance> instances_;
  uint8_t used_slots_ = 0;
  int used_compute_ = 0;
};

}  // namespace cnlab::model
