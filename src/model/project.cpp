#include "model/project.h"

namespace cnlab::model {

Json to_json(const Project& project) {
  Json spec = {{"share", project.share}};
  if (!project.user_shares.empty()) spec["user_shares"] = project.user_shares;
  return {{"kind", "Project"}, {"metadata", to_json(project.meta)}, {"spec", std::move(spec)}};
}

Result<Project> project_from_json(const Json& json) {
  JsonReader root(json, "");
  root.only({"kind", "metadata", "spec"});
  if (std::string kind = root.string_or("kind", "Project"); kind != "Project") {
    root.fail(Error::invalid_argument("kind", kind, "expected \"Project\""));
  }
  const Json empty = Json::object();
  const Json* metadata = root.object("metadata");
  if (!metadata && root.status()) root.fail(Error::invalid_argument("metadata", "", "required field is missing"));
  const Json* spec = root.object("spec");
  if (!root.status()) return root.status().error();

  Project project;
  JsonReader meta(*metadata, "metadata");
  meta.only({"name", "uid", "labels", "revision"});
  project.meta = read_meta(meta);
  if (!meta.status()) return meta.status().error();

  JsonReader s(spec ? *spec : empty, "spec");
  s.only({"share", "user_shares"});
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
  if (!s.status()) return s.status().error();
  return project;
}

}  // namespace cnlab::model
