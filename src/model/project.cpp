#include "model/project.h"

#include "model/decode.h"

namespace cnlab::model {

Json to_json(const Project& project) {
  Json spec = {{"share", project.share}};
  if (!project.user_shares.empty()) spec["user_shares"] = project.user_shares;
  if (!project.description.empty()) spec["description"] = project.description;
  return {{"kind", "Project"}, {"metadata", to_json(project.meta)}, {"spec", std::move(spec)}};
}

Result<Project> project_from_json(const Json& json) {
  auto parts = read_object(json, "Project");
  if (!parts) return parts.error();
  if (parts->status != nullptr && !parts->status->empty()) {
    return Error::invalid_argument("status", parts->status->dump(), "a Project has no status");
  }
  Project project;
  project.meta = std::move(parts->meta);

  JsonReader s(*parts->spec, "spec");
  s.only({"share", "user_shares", "description"});
  project.share = s.number_or("share", 1.0, 1e-6, 1e6);
  if (const Json* users = s.object("user_shares")) {
    JsonReader u(*users, "spec.user_shares");
    for (const auto& [user, unused] : users->items()) {
      if (auto valid = validate_name(user, u.path_of(user)); !valid) {
        u.fail(valid.error());
        break;
      }
      project.user_shares[user] = u.number_or(user, 1.0, 1e-6, 1e6);
    }
    if (!u.status()) s.fail(u.status().error());
  }
  project.description = detail::bounded_string(s, "description", kMaxDescriptionBytes);
  if (!s.status()) return s.status().error();
  return project;
}

}  // namespace cnlab::model
