// A Project: a team's unit of ownership, fair share and (later) quota.
#pragma once

#include <map>
#include <string>

#include "common/json_reader.h"
#include "model/object_meta.h"

namespace cnlab::model {

inline constexpr size_t kMaxDescriptionBytes = 4096;

struct Project {
  ObjectMeta meta;
  double share = 1.0;                         // weight of the project against its siblings
  std::map<std::string, double> user_shares;  // weights of users inside it; 1.0 when absent
  std::string description;                    // for people; at most kMaxDescriptionBytes, no NUL

  bool operator==(const Project&) const = default;
};

// JSON: spec {"share", "user_shares", "description"}; a Project has no status.
Json to_json(const Project& project);
Result<Project> project_from_json(const Json& json);

}  // namespace cnlab::model
