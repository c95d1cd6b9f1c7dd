// The policy list of `cnlab sim alloc`. A policy added here with PolicyRegistry::add is offered by
// --policies and run by default; it gets no trace knowledge (see PolicyRegistry::add), e.g.
//   registry.add("cnlab", [] { return std::make_unique<CnlabPlacementPolicy>(); });
#include "sim/policies/cnlab_policy.h"
#include "sim/policy_registry.h"

namespace cnlab::sim {

PolicyRegistry default_policies() {
  PolicyRegistry registry = PolicyRegistry::with_baselines();
  CNLAB_CHECK(registry.add("cnlab", [] { return std::make_unique<CnlabPolicy>(); }).has_value());
  return registry;
}

}  // namespace cnlab::sim
