// A Quota: limits on what a project, or one user in it, may hold at once and use over a window.
// Every limit is optional; an absent one is unlimited. Several quotas may apply to one job (the
// project's and the user's); admission checks each.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "common/json_reader.h"
#include "common/time.h"
#include "model/object_meta.h"

namespace cnlab::model {

inline constexpr Duration kDefaultGpuHoursWindow = 7 * kDay;

struct Quota {
  ObjectMeta meta;
  std::string project;  // the project limited
  std::string user;     // a user inside it; empty = the whole project
  // 1% blocks held at once, per GPU model, keyed by the catalog's model name ("h100"); a whole GPU
  // is 100 blocks. Models not listed are limited only by `gpus`. "any" is not a model here.
  std::map<std::string, int64_t> blocks_per_model;
  std::optional<int64_t> gpus;             // whole GPUs held at once, all models together
  std::optional<int64_t> concurrent_jobs;  // jobs Scheduled or Running at once
  std::optional<double> gpu_hours;         // GPU-hours used within the trailing window
  Duration gpu_hours_window = kDefaultGpuHoursWindow;
  // Jobs over the quota may still be admitted, as pre-emptible, while capacity is idle.
  bool borrowing = false;

  bool operator==(const Quota&) const = default;
};

// JSON: {"kind":"Quota","metadata":{...},"spec":{"project","user","blocks_per_model":{"h100":200},
// "gpus","concurrent_jobs","gpu_hours","gpu_hours_window":"7d","borrowing"}}; absent limits are
// omitted; no status.
Json to_json(const Quota& quota);
// Decodes and validates; the error names the JSON path of the first bad field
// ("spec.blocks_per_model.h900"). Model names are matched case-insensitively and stored as the
// catalog writes them.
Result<Quota> quota_from_json(const Json& json);
// The checks decoding applies: valid project (and user) names, model keys the catalog's names,
// no negative limit, a window longer than 0s.
Status validate(const Quota& quota);

}  // namespace cnlab::model
