#include "model/quota.h"

#include <fmt/format.h>

#include "model/decode.h"
#include "model/gpu_catalog.h"

namespace cnlab::model {
namespace {

constexpr int64_t kMaxLimit = int64_t{1} << 50;
constexpr double kMaxGpuHours = 1e12;

// A model a quota may name: one of the catalog's, "any" refused with a reason of its own.
Result<ModelId> quota_model(std::string_view name, std::string_view field) {
  if (name == "any") {
    return Error::invalid_argument(
        std::string(field), std::string(name),
        "a quota limits blocks of a named model, \"any\" is not one; known models: " + model_names());
  }
  return parse_model(name, field);
}

}  // namespace

Status validate(const Quota& quota) {
  if (auto s = validate_name(quota.meta.name, "metadata.name"); !s) return s;
  if (auto s = validate_name(quota.project, "spec.project"); !s) return s;
  if (!quota.user.empty()) {
    if (auto s = validate_name(quota.user, "spec.user"); !s) return s;
  }
  for (const auto& [model, blocks] : quota.blocks_per_model) {
    std::string field = "spec.blocks_per_model." + model;
    auto id = quota_model(model, field);
    if (!id) return id.error();
    if (gpu_model(*id).name != model) {
      return Error::invalid_argument(field, model, fmt::format("write the model as \"{}\"", gpu_model(*id).name));
    }
    if (blocks < 0) return Error::invalid_argument(field, std::to_string(blocks), "must be 0 or more");
  }
  if (quota.gpus && *quota.gpus < 0) {
    return Error::invalid_argument("spec.gpus", std::to_string(*quota.gpus), "must be 0 or more");
  }
  if (quota.concurrent_jobs && *quota.concurrent_jobs < 0) {
    return Error::invalid_argument("spec.concurrent_jobs", std::to_string(*quota.concurrent_jobs), "must be 0 or more");
  }
  if (quota.gpu_hours && !(*quota.gpu_hours >= 0 && *quota.gpu_hours <= kMaxGpuHours)) {
    return Error::invalid_argument("spec.gpu_hours", fmt::format("{}", *quota.gpu_hours),
                                   fmt::format("must be 0..{}", kMaxGpuHours));
  }
  if (quota.gpu_hours_window.count() <= 0) {
    return Error::invalid_argument("spec.gpu_hours_window", format_duration(quota.gpu_hours_window),
                                   "must be longer than 0s");
  }
  return Status::ok();
}

Json to_json(const Quota& quota) {
  Json spec = {{"project", quota.project},
               {"user", quota.user},
               {"blocks_per_model", quota.blocks_per_model.empty() ? Json::object() : Json(quota.blocks_per_model)},
               {"gpu_hours_window", format_duration(quota.gpu_hours_window)},
               {"borrowing", quota.borrowing}};
  if (quota.gpus) spec["gpus"] = *quota.gpus;
  if (quota.concurrent_jobs) spec["concurrent_jobs"] = *quota.concurrent_jobs;
  if (quota.gpu_hours) spec["gpu_hours"] = *quota.gpu_hours;
  return {{"kind", "Quota"}, {"metadata", to_json(quota.meta)}, {"spec", std::move(spec)}};
}

Result<Quota> quota_from_json(const Json& json) {
  auto parts = read_object(json, "Quota");
  if (!parts) return parts.error();
  if (auto s = detail::no_status(parts->status, "Quota"); !s) return s.error();
  Quota quota;
  quota.meta = std::move(parts->meta);
  JsonReader s(*parts->spec, "spec");
  s.only(
      {"project", "user", "blocks_per_model", "gpus", "concurrent_jobs", "gpu_hours", "gpu_hours_window", "borrowing"});
  quota.project = detail::required_name(s, "project");
  quota.user = detail::optional_name(s, "user");
  if (const Json* blocks = s.object("blocks_per_model")) {
    JsonReader b(*blocks, "spec.blocks_per_model");
    for (const auto& [model, unused] : blocks->items()) {
      auto id = quota_model(model, b.path_of(model));
      if (!id) {
        b.fail(id.error());
        break;
      }
      std::string name(gpu_model(*id).name);
      if (quota.blocks_per_model.contains(name)) {
        b.fail(Error::invalid_argument(b.path_of(model), model, fmt::format("repeats the model \"{}\"", name)));
        break;
      }
      quota.blocks_per_model[name] = b.integer_or(model, 0, 0, kMaxLimit);
    }
    if (!b.status()) s.fail(b.status().error());
  }
  quota.gpus = detail::optional_integer(s, "gpus", 0, kMaxLimit);
  quota.concurrent_jobs = detail::optional_integer(s, "concurrent_jobs", 0, kMaxLimit);
  if (s.has("gpu_hours")) quota.gpu_hours = s.number_or("gpu_hours", 0, 0, kMaxGpuHours);
  quota.gpu_hours_window = s.duration("gpu_hours_window").value_or(kDefaultGpuHoursWindow);
  if (s.status() && quota.gpu_hours_window.count() <= 0) {
    s.fail(Error::invalid_argument(s.path_of("gpu_hours_window"), format_duration(quota.gpu_hours_window),
                                   "must be longer than 0s"));
  }
  quota.borrowing = s.boolean_or("borrowing", false);
  if (!s.status()) return s.status().error();
  if (auto valid = validate(quota); !valid) return valid.error();
  return quota;
}

}  // namespace cnlab::model
