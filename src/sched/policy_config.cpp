#include "sched/policy_config.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "model/object_meta.h"

namespace cnlab::sched {

const char* queue_order_name(QueueOrder order) {
  return order == QueueOrder::kResponseRatio ? "response_ratio" : "submitted";
}

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
          "gangs_span_nodes", "max_migrations_per_cycle", "max_moves_per_job", "migrate_gpu_jobs", "move_higher_tiers", "migration_cooldown",
          "migrate_after_wait", "migration_pause_base_ms", "migration_pause_per_gib_ms", "max_drain_moves_per_cycle",
          "drain_reserve", "default_estimate"});
  if (const Json* tiers = r.array("tiers")) {
    config.tiers.clear();
    for (size_t i = 0; i < tiers->size(); ++i) {
      JsonReader t((*tiers)[i], fmt::format("tiers[{}]", i));
      t.only({"name", "may_preempt", "min_runtime", "order"});
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
      const std::string order = t.string_or("order", queue_order_name(tier.order));
      if (order == queue_order_name(QueueOrder::kResponseRatio)) {
        tier.order = QueueOrder::kResponseRatio;
      } else if (order != queue_order_name(QueueOrder::kSubmitted)) {
        t.fail(Error::invalid_argument(t.path_of("order"), order, "must be \"submitted\" or \"response_ratio\""));
      }
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
  config.default_estimate = r.duration("default_estimate").value_or(config.default_estimate);
  if (config.default_estimate.count() <= 0) {
    r.fail(Error::invalid_argument("default_estimate", format_duration(config.default_estimate),
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
  config.max_migrations_per_cycle =
      static_cast<int>(r.integer_or("max_migrations_per_cycle", config.max_migrations_per_cycle, 0, 100000));
  config.max_moves_per_job = static_cast<int>(r.integer_or("max_moves_per_job", config.max_moves_per_job, 1, 64));
  config.migrate_gpu_jobs = r.boolean_or("migrate_gpu_jobs", config.migrate_gpu_jobs);
  config.move_higher_tiers = r.boolean_or("move_higher_tiers", config.move_higher_tiers);
  config.migration_cooldown = r.duration("migration_cooldown").value_or(config.migration_cooldown);
  config.migrate_after_wait = r.duration("migrate_after_wait").value_or(config.migrate_after_wait);
  auto millis = [&](const char* field, std::chrono::milliseconds fallback) {
    return std::chrono::milliseconds(r.integer_or(field, fallback.count(), 0, 3'600'000));
  };
  config.migration_pause_base = millis("migration_pause_base_ms", config.migration_pause_base);
  config.migration_pause_per_gib = millis("migration_pause_per_gib_ms", config.migration_pause_per_gib);
  config.max_drain_moves_per_cycle =
      static_cast<int>(r.integer_or("max_drain_moves_per_cycle", config.max_drain_moves_per_cycle, 0, 100000));
  config.drain_reserve = r.number_or("drain_reserve", config.drain_reserve, 0.0, 0.95);
  if (!r.status()) return r.status().error();
  if (config.max_drain_moves_per_cycle > 0 && config.max_migrations_per_cycle == 0) {
    return Error::invalid_argument("max_drain_moves_per_cycle", std::to_string(config.max_drain_moves_per_cycle),
                                   "drain moves are live migrations and count against max_migrations_per_cycle, "
                                   "which is 0 (migration off); set max_migrations_per_cycle above 0 too, or this to 0");
  }
  return config;
}

Json to_json(const PolicyConfig& config) {
  Json tiers = Json::array();
  for (const auto& t : config.tiers) {
    tiers.push_back({{"name", t.name},
                     {"may_preempt", t.may_preempt},
                     {"min_runtime", format_duration(t.min_runtime)},
                     {"order", queue_order_name(t.order)}});
  }
  return {{"tiers", tiers},
          {"default_estimate", format_duration(config.default_estimate)},
          {"fair_share_half_life", format_duration(config.fair_share_half_life)},
          {"deadline_urgency", format_duration(config.deadline_urgency)},
          {"backfill", config.backfill},
          {"reserve_top_jobs", config.reserve_top_jobs},
          {"max_reservations", config.max_reservations},
          {"max_preemptors_per_cycle", config.max_preemptors_per_cycle},
          {"repartition_idle_gpus", config.repartition_idle_gpus},
          {"power_down_after", format_duration(config.power_down_after)},
          {"placement_candidates", config.placement_candidates},
          {"gangs_span_nodes", config.gangs_span_nodes},
          {"max_migrations_per_cycle", config.max_migrations_per_cycle},
          {"max_moves_per_job", config.max_moves_per_job},
          {"migrate_gpu_jobs", config.migrate_gpu_jobs},
          {"move_higher_tiers", config.move_higher_tiers},
          {"migration_cooldown", format_duration(config.migration_cooldown)},
          {"migrate_after_wait", format_duration(config.migrate_after_wait)},
          {"migration_pause_base_ms", config.migration_pause_base.count()},
          {"migration_pause_per_gib_ms", config.migration_pause_per_gib.count()},
          {"max_drain_moves_per_cycle", config.max_drain_moves_per_cycle},
          {"drain_reserve", config.drain_reserve}};
}

Result<PolicyConfig> policy_config_from_file(const std::string& path, std::string_view flag) {
  std::ifstream in(path);
  if (!in) return Error::invalid_argument(std::string(flag), path, "cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  Json json = Json::parse(text.str(), nullptr, false);
  if (json.is_discarded() || !json.is_object()) {
    return Error::invalid_argument(std::string(flag), path, "must hold a JSON object of scheduler settings (docs/scheduler.md)");
  }
  auto config = policy_config_from_json(json);
  if (!config) {
    Error error = config.error();
    error.field = fmt::format("{} {}: {}", flag, path, error.field);
    return error;
  }
  return config;
}

}  // namespace cnlab::sched
