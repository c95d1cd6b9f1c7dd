// A RoleBinding: gives a user a role in one project, or everywhere ("*"). src/auth turns the role
// name into its Role and decides what each role allows.
#pragma once

#include <string>
#include <string_view>

#include "common/json_reader.h"
#include "model/object_meta.h"

namespace cnlab::model {

// The project of a cluster-wide binding.
inline constexpr std::string_view kAllProjects = "*";
// The role names a binding may hold, weakest first (the same names src/auth parses).
inline constexpr std::string_view kRoleNames[] = {"viewer", "member", "project-admin", "admin"};

struct RoleBinding {
  ObjectMeta meta;
  std::string user;     // a user name
  std::string project;  // a project name, or "*" for every project
  std::string role;     // one of kRoleNames

  bool operator==(const RoleBinding&) const = default;
};

// JSON: {"kind":"RoleBinding","metadata":{...},"spec":{"user","project","role"}}; no status.
Json to_json(const RoleBinding& binding);
// Decodes and validates; the error names the JSON path of the first bad field (spec.role lists the
// four role names).
Result<RoleBinding> role_binding_from_json(const Json& json);
// The checks decoding applies: user a valid name, project a valid name or "*", a known role.
Status validate(const RoleBinding& binding);

}  // namespace cnlab::model
