#include "sched/policy_config.h"

#include <fmt/format.h>

#include "model/object_meta.h"

namespace cnlab::sched {

int PolicyConfig::tier_index(std::string_view name) const {
  for (size_t i = 0; i < tiers.size(); ++i) {
    if (tiers[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

Result<PolicyConfig> policy_config_from_json(const Json& json) {
  PolicyConfig config;
  JsonReader r(json, "");
  r.only({"tiers", "fair_share_half_life", "deadline_urgency", "backfill", "reserve_top_jobs",
          "max_reservations", "max_preemptors_per_cycle", "repartition_idle_gpus", "power_down_after", "placement_candidates",
          "gangs_span_nodes"});
  if (const Json* tiers = r.array("tiers")) {
    config.tiers.clear();
    for (size_t i = 0; i < tiers->size(); ++i) {
      JsonReader t((*tiers)[i], fmt::format("tiers[{}]", i));
      t.only({"name", "may_preempt", "min_runtime"});
      TierConfig tier;
      tier.name = t.string("name");
      if (t.status()) {
        if (auto valid = model::validate_name(tier.name, t.path_of("name")); !valid) t.fail(valid.error());
      }
      if (t.status() && config.tier_index(tier.name) >= 0) {
        t.fail(Error::invalid_argument(t.path_of("name"), tier.name, "tier names must be unique"));
      }
      tier.may_preempt = t.boolean_or("may_preempt", false);
      tier.min_runtime = t.duration("min_runtime").value_or(tier.min_runtime);
      if (!t.status()) return t.status().error();
      config.tiers.push_back(tier);
    }
    if (config.tiers.empty()) return Error::invalid_argument("tiers", "[]", "at least one tier is needed");
  }
  config.fair_share_half_life = r.duration("fair_share_half_life").value_or(config.fair_share_half_life);
  if (config.fair_share_half_life.count() <= 0) {
    r.fail(Error::invalid_argument("fair_share_half_life", format_duration(config.fair_share_half_life),
                                   "must be longer than 0s"));
  }
  config.deadline_urgency = r.duration("deadline_urgency").value_or(config.deadline_urgency);
  config.backfill = r.boolean_or("backfill", config.backfill);
  config.reserve_top_jobs = static_cast<int>(r.integer_or("reserve_top_jobs", config.reserve_top_jobs, 0, 10000));
  config.max_reservations = static_cast<int>(r.integer_or("max_reservations", config.max_reservations, 0, 100000));
  config.max_preemptors_per_cycle =
      static_cast<int>(r.integer_or("max_preemptors_per_cycle", config.max_preemptors_per_cycle, 0, 100000));
  config.repartition_idle_gpus = r.boolean_or("repartition_idle_gpus", config.repartition_idle_gpus);
  config.power_down_after = r.duration("power_down_after").value_or(config.power_down_after);
  config.placement_candidates =
      static_cast<int>(r.integer_or("placement_candidates", config.placement_candidates, 1, 1'000'000));
  config.gangs_span_nodes = r.boolean_or("gangs_span_nodes", config.gangs_span_nodes);
  if (!r.status()) return r.status().error();
  return config;
}

Json to_json(const PolicyConfig& config) {
  Json tiers = Json::array();
  for (const auto& t : config.tiers) {
    tiers.push_back({{"name", t.name}, {"may_preempt", t.may_preempt}, {"min_runtime", format_duration(t.min_runtime)}});
  }
  return {{"tiers", tiers},
          {"fair_share_half_life", format_duration(config.fair_share_half_life)},
          {"deadline_urgency", format_duration(config.deadline_urgency)},
          {"backfill", config.backfill},
          {"reserve_top_jobs", config.reserve_top_jobs},
          {"max_reservations", config.max_reservations},
          {"max_preemptors_per_cycle", config.max_preemptors_per_cycle},
          {"repartition_idle_gpus", config.repartition_idle_gpus},
          {"power_down_after", format_duration(config.power_down_after)},
          {"placement_candidates", config.placement_candidates},
          {"gangs_span_nodes", config.gangs_span_nodes}};
}

}  // namespace cnlab::sched
