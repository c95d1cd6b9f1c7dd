#include "model/role_binding.h"

#include "model/decode.h"

namespace cnlab::model {

Status validate(const RoleBinding& binding) {
  if (auto s = validate_name(binding.meta.name, "metadata.name"); !s) return s;
  if (auto s = validate_name(binding.user, "spec.user"); !s) return s;
  if (binding.project != kAllProjects) {
    if (auto s = validate_name(binding.project, "spec.project"); !s) {
      Error e = s.error();
      e.message = "expected a project name or \"*\" (every project); " + e.message;
      return e;
    }
  }
  for (std::string_view role : kRoleNames) {
    if (role == binding.role) return Status::ok();
  }
  return Error::invalid_argument("spec.role", binding.role, "known roles: admin, project-admin, member, viewer");
}

Json to_json(const RoleBinding& binding) {
  Json spec = {{"user", binding.user}, {"project", binding.project}, {"role", binding.role}};
  return {{"kind", "RoleBinding"}, {"metadata", to_json(binding.meta)}, {"spec", std::move(spec)}};
}

Result<RoleBinding> role_binding_from_json(const Json& json) {
  auto parts = read_object(json, "RoleBinding");
  if (!parts) return parts.error();
  if (auto s = detail::no_status(parts->status, "RoleBinding"); !s) return s.error();
  RoleBinding binding;
  binding.meta = std::move(parts->meta);
  JsonReader s(*parts->spec, "spec");
  s.only({"user", "project", "role"});
  binding.user = s.string("user");
  binding.project = s.string("project");
  binding.role = s.string("role");
  if (!s.status()) return s.status().error();
  if (auto valid = validate(binding); !valid) return valid.error();
  return binding;
}

}  // namespace cnlab::model
