// The policies `cnlab sim alloc --policies` knows, by lowercase key.
//
// The six baselines are built in. Another policy is added with PolicyRegistry::add, which takes a
// factory without arguments on purpose: such a policy sees the pods only as they arrive. FGD alone
// is given the trace's typical-pod distribution, as in the paper.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/common.h"
#include "sim/alloc_policy.h"
#include "sim/alloc_workload.h"

namespace cnlab::sim {

using OnlinePolicyFactory = std::function<std::unique_ptr<AllocPolicy>()>;

// "random,dotprod,gpuclustering,gpupacking,bestfit,fgd".
const std::vector<std::string>& baseline_policy_keys();

// A fresh baseline policy for one run. `typical` is the workload's distribution (only FGD reads it).
// Fails naming the valid keys when `name` is not one (case does not matter).
Result<std::unique_ptr<AllocPolicy>> make_baseline_policy(std::string_view name, const TypicalPods& typical);

class PolicyRegistry {
 public:
  // Empty; see with_baselines().
  PolicyRegistry() = default;
  static PolicyRegistry with_baselines();

  // Registers an online policy under `key` (lowercase letters, digits, '-' or '_'). Fails when
  // the key is malformed or taken.
  Status add(std::string key, OnlinePolicyFactory factory);

  bool contains(std::string_view key) const;
  // Keys in registration order.
  std::vector<std::string> keys() const;
  // A fresh policy for one run of `workload`. Fails naming the valid keys.
  Result<std::unique_ptr<AllocPolicy>> make(std::string_view key, const Workload& workload) const;

 private:
  struct Entry {
    std::string key;
    std::function<std::unique_ptr<AllocPolicy>(const Workload&)> make;
  };
  std::vector<Entry> entries_;
  Error unknown(std::string_view key) const;
};

// The policies `cnlab sim alloc` offers: the six baselines, then any policy registered in
// default_policies.cpp (where CNLab's own placement is to be added, one registry.add line).
PolicyRegistry default_policies();

}  // namespace cnlab::sim
