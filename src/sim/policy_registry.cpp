#include "sim/policy_registry.h"

#include <fmt/format.h>

#include "sim/policies/best_fit_policy.h"
#include "sim/policies/dot_prod_policy.h"
#include "sim/policies/fgd_policy.h"
#include "sim/policies/gpu_clustering_policy.h"
#include "sim/policies/gpu_packing_policy.h"
#include "sim/policies/random_policy.h"

namespace cnlab::sim {

const std::vector<std::string>& baseline_policy_keys() {
  static const std::vector<std::string> keys = {"random", "dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd"};
  return keys;
}

Result<std::unique_ptr<AllocPolicy>> make_baseline_policy(std::string_view name, const TypicalPods& typical) {
  std::string key = to_lower(trim(name));
  if (key == "random") return std::unique_ptr<AllocPolicy>(std::make_unique<RandomPolicy>());
  if (key == "dotprod") return std::unique_ptr<AllocPolicy>(std::make_unique<DotProdPolicy>());
  if (key == "gpuclustering") return std::unique_ptr<AllocPolicy>(std::make_unique<GpuClusteringPolicy>());
  if (key == "gpupacking") return std::unique_ptr<AllocPolicy>(std::make_unique<GpuPackingPolicy>());
  if (key == "bestfit") return std::unique_ptr<AllocPolicy>(std::make_unique<BestFitPolicy>());
  if (key == "fgd") return std::unique_ptr<AllocPolicy>(std::make_unique<FgdPolicy>(typical));
  return Error::invalid_argument("policy", std::string(name),
                                 fmt::format("unknown policy; valid: {}", join(baseline_policy_keys(), ", ")));
}

PolicyRegistry PolicyRegistry::with_baselines() {
  PolicyRegistry registry;
  for (const std::string& key : baseline_policy_keys()) {
    registry.entries_.push_back({key, [key](const Workload& workload) {
                                   return std::move(make_baseline_policy(key, workload.typical).value());
                                 }});
  }
  return registry;
}

Status PolicyRegistry::add(std::string key, OnlinePolicyFactory factory) {
  bool well_formed = !key.empty();
  for (char c : key) {
    well_formed = well_formed && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_');
  }
  if (!well_formed) {
    return Error::invalid_argument("policy key", key, "must be lowercase letters, digits, '-' or '_'");
  }
  if (contains(key)) return Error::invalid_argument("policy key", key, "is already registered");
  if (!factory) return Error::invalid_argument("policy key", key, "needs a factory");
  entries_.push_back({std::move(key), [factory = std::move(factory)](const Workload&) { return factory(); }});
  return Status::ok();
}

bool PolicyRegistry::contains(std::string_view key) const {
  for (const Entry& e : entries_) {
    if (e.key == key) return true;
  }
  return false;
}

std::vector<std::string> PolicyRegistry::keys() const {
  std::vector<std::string> out;
  for (const Entry& e : entries_) out.push_back(e.key);
  return out;
}

Error PolicyRegistry::unknown(std::string_view key) const {
  return Error::invalid_argument("policy", std::string(key), fmt::format("unknown policy; valid: {}", join(keys(), ", ")));
}

Result<std::unique_ptr<AllocPolicy>> PolicyRegistry::make(std::string_view key, const Workload& workload) const {
  std::string lower = to_lower(trim(key));
  for (const Entry& e : entries_) {
    if (e.key != lower) continue;
    auto policy = e.make(workload);
    if (!policy) return Error::internal(fmt::format("the factory of policy {} returned no policy", lower));
    return policy;
  }
  return unknown(key);
}

}  // namespace cnlab::sim
