// Projects, users, role bindings, quotas, API tokens and join tokens: the objects of access control.
#include <fmt/format.h>

#include "server/api.h"
#include "server/api_error.h"

namespace cnlab::server {
namespace {

constexpr Duration kMaxTokenTtl = 3 * 365 * kDay;

Result<Json> object_body(const std::string& text, const std::string& kind) {
  Json body = Json::parse(text, nullptr, false);
  if (body.is_discarded() || !body.is_object()) return Error::invalid_argument("body", text.substr(0, 64), "expected a JSON object");
  if (!body.contains("kind")) body["kind"] = kind;
  return body;
}

Error admins_only(const std::string& what) {
  return Error::of(ErrorCode::kPermissionDenied, "", "", "only cluster admins " + what);
}

template <typename T>
Json items_json(const std::vector<T>& items) {
  Json out = Json::array();
  for (const auto& item : items) out.push_back(to_json(item));
  return out;
}

Result<Duration> ttl_of(const Json& body, Duration fallback) {
  if (!body.contains("ttl")) return fallback;
  if (!body["ttl"].is_string()) return Error::invalid_argument("ttl", body["ttl"].dump(), "expected a duration such as \"30d\"");
  auto ttl = parse_duration(body["ttl"].get<std::string>(), "ttl");
  if (!ttl) return ttl.error();
  if (ttl->count() <= 0 || *ttl > kMaxTokenTtl) {
    return Error::invalid_argument("ttl", body["ttl"].get<std::string>(), "expected more than 0s and at most 3 years");
  }
  return *ttl;
}

}  // namespace

net::Response Api::create_project(const Call& call) {
  if (!call.caller.admin()) {
    audit_refusal(call, "projects.create", "", admins_only("create projects"));
    return error_response(admins_only("create projects"));
  }
  auto body = object_body(call.request.body, "Project");
  if (!body) return error_response(body.error());
  auto project = model::project_from_json(*body);
  if (!project) return error_response(project.error());
  project->meta.revision = 0;
  auto committed = commit(call, {store::Op::create(kind::kProjects, project->meta.name, to_json(*project).dump())},
                          "projects.create", project->meta.name);
  if (!committed) return error_response(committed.error());
  project->meta.revision = committed->revision;
  return json_response(201, to_json(*project));
}

net::Response Api::list_projects(const Call& call) {
  std::vector<model::Project> items;
  ctx_.cache.read([&](const ObjectCache& c) {
    c.projects.for_each([&](const std::string& name, const model::Project& p, int64_t) {
      if (call.caller.sees(name)) items.push_back(p);
    });
    return 0;
  });
  return json_response(200, {{"items", items_json(items)}});
}

net::Response Api::get_project(const Call& call) {
  const std::string& name = call.param("name");
  auto project = ctx_.cache.read([&](const ObjectCache& c) { return c.projects.get(name); });
  if (!project.object || !call.caller.sees(name)) return error_response(Error::not_found("project", name, "no such project"));
  return json_response(200, to_json(*project.object));
}

net::Response Api::create_user(const Call& call) {
  if (!call.caller.admin()) return error_response(admins_only("create users"));
  auto body = object_body(call.request.body, "User");
  if (!body) return error_response(body.error());
  auto user = model::user_from_json(*body);
  if (!user) return error_response(user.error());
  user->meta.revision = 0;
  auto committed = commit(call, {store::Op::create(kind::kUsers, user->meta.name, to_json(*user).dump())}, "users.create",
                          user->meta.name);
  if (!committed) return error_response(committed.error());
  user->meta.revision = committed->revision;
  return json_response(201, to_json(*user));
}

net::Response Api::list_users(const Call& call) {
  if (!call.caller.admin()) return error_response(admins_only("list users"));
  std::vector<model::User> items;
  ctx_.cache.read([&](const ObjectCache& c) {
    c.users.for_each([&](const std::string&, const model::User& u, int64_t) { items.push_back(u); });
    return 0;
  });
  return json_response(200, {{"items", items_json(items)}});
}

net::Response Api::create_role_binding(const Call& call) {
  auto body = object_body(call.request.body, "RoleBinding");
  if (!body) return error_response(body.error());
  if (!body->contains("metadata")) {
    // The natural name: one binding per user and project.
    const Json& spec = body->value("spec", Json::object());
    std::string project = spec.value("project", "");
    (*body)["metadata"] = {{"name", (project == "*" ? std::string("cluster") : project) + "." + spec.value("user", "")}};
  }
  auto binding = model::role_binding_from_json(*body);
  if (!binding) return error_response(binding.error());
  bool granting_admin = binding->project == "*" || binding->role == "admin";
  if (!call.caller.admin() && (granting_admin || !call.caller.can(binding->project, auth::Action::kManageProject))) {
    Error denied = Error::of(ErrorCode::kPermissionDenied, "spec.project", binding->project,
                             granting_admin ? "only cluster admins grant admin or cluster-wide roles"
                                            : "only the project's admins grant roles in it");
    audit_refusal(call, "rolebindings.create", binding->meta.name, denied);
    return error_response(denied);
  }
  binding->meta.revision = 0;
  auto committed = commit(call, {store::Op::create(kind::kRoleBindings, binding->meta.name, to_json(*binding).dump())},
                          "rolebindings.create", binding->meta.name,
                          {{"user", binding->user}, {"project", binding->project}, {"role", binding->role}});
  if (!committed) return error_response(committed.error());
  binding->meta.revision = committed->revision;
  return json_response(201, to_json(*binding));
}

net::Response Api::list_role_bindings(const Call& call) {
  std::vector<model::RoleBinding> items;
  ctx_.cache.read([&](const ObjectCache& c) {
    c.role_bindings.for_each([&](const std::string&, const model::RoleBinding& b, int64_t) {
      if (call.caller.admin() || b.user == call.caller.user || call.caller.can(b.project, auth::Action::kManageProject)) {
        items.push_back(b);
      }
    });
    return 0;
  });
  return json_response(200, {{"items", items_json(items)}});
}

net::Response Api::delete_role_binding(const Call& call) {
  const std::string& name = call.param("name");
  auto binding = ctx_.cache.read([&](const ObjectCache& c) { return c.role_bindings.get(name); });
  if (!binding.object) return error_response(Error::not_found("rolebinding", name, "no such role binding"));
  bool allowed = call.caller.admin() ||
                 (binding.object->project != "*" && binding.object->role != "admin" &&
                  call.caller.can(binding.object->project, auth::Action::kManageProject));
  if (!allowed) {
    Error denied = Error::of(ErrorCode::kPermissionDenied, "rolebinding", name, "only the project's admins remove roles in it");
    audit_refusal(call, "rolebindings.delete", name, denied);
    return error_response(denied);
  }
  auto committed = commit(call, {store::Op::remove(kind::kRoleBindings, name, binding.revision)}, "rolebindings.delete", name);
  if (!committed) return error_response(committed.error());
  return json_response(200, {{"deleted", name}});
}

net::Response Api::put_quota(const Call& call) {
  const std::string& name = call.param("name");
  if (!call.caller.admin()) {
    audit_refusal(call, "quotas.put", name, admins_only("set quotas"));
    return error_response(admins_only("set quotas"));
  }
  auto body = object_body(call.request.body, "Quota");
  if (!body) return error_response(body.error());
  if (!body->contains("metadata")) (*body)["metadata"] = {{"name", name}};
  auto quota = model::quota_from_json(*body);
  if (!quota) return error_response(quota.error());
  if (quota->meta.name != name) return error_response(Error::invalid_argument("metadata.name", quota->meta.name, "must be " + name));
  quota->meta.revision = 0;
  int64_t revision = ctx_.cache.read([&](const ObjectCache& c) { return c.quotas.get(name).object ? c.quotas.revision_of(name) : 0; });
  std::string value = to_json(*quota).dump();
  auto op = revision ? store::Op::update(kind::kQuotas, name, value, revision) : store::Op::create(kind::kQuotas, name, value);
  auto committed = commit(call, {op}, "quotas.put", name, Json::parse(value)["spec"]);
  if (!committed) return error_response(committed.error());
  quota->meta.revision = committed->revision;
  return json_response(200, to_json(*quota));
}

net::Response Api::list_quotas(const Call& call) {
  std::vector<model::Quota> items;
  ctx_.cache.read([&](const ObjectCache& c) {
    c.quotas.for_each([&](const std::string&, const model::Quota& q, int64_t) {
      if (call.caller.sees(q.project)) items.push_back(q);
    });
    return 0;
  });
  return json_response(200, {{"items", items_json(items)}});
}

net::Response Api::delete_quota(const Call& call) {
  const std::string& name = call.param("name");
  if (!call.caller.admin()) return error_response(admins_only("remove quotas"));
  int64_t revision = ctx_.cache.read([&](const ObjectCache& c) { return c.quotas.get(name).object ? c.quotas.revision_of(name) : 0; });
  if (!revision) return error_response(Error::not_found("quota", name, "no such quota"));
  auto committed = commit(call, {store::Op::remove(kind::kQuotas, name, revision)}, "quotas.delete", name);
  if (!committed) return error_response(committed.error());
  return json_response(200, {{"deleted", name}});
}

net::Response Api::create_token(const Call& call) {
  auto body = object_body(call.request.body, "Token");
  if (!body) return error_response(body.error());
  JsonReader r(*body, "");
  r.only({"kind", "user", "project", "ttl", "role"});
  std::string user = r.string("user");
  std::string project = r.string_or("project", "");
  std::string role = r.string_or("role", "");
  if (!r.status()) return error_response(r.status().error());
  if (auto valid = model::validate_name(user, "user"); !valid) return error_response(valid.error());
  if (!project.empty()) {
    if (auto valid = model::validate_name(project, "project"); !valid) return error_response(valid.error());
  }
  auto ttl = ttl_of(*body, 30 * kDay);
  if (!ttl) return error_response(ttl.error());
  if (!call.caller.admin() && (user != call.caller.user || !role.empty())) {
    Error denied = admins_only("create tokens for other users or grant roles");
    audit_refusal(call, "tokens.create", user, denied);
    return error_response(denied);
  }
  if (!call.caller.admin() && call.now + *ttl > call.caller.token_expires_at) {
    // A leaked token must not be able to renew itself beyond its own life.
    return error_response(Error::invalid_argument("ttl", format_duration(*ttl),
                                                  "a token you mint for yourself may not outlive the one you use (it expires " +
                                                      format_rfc3339(call.caller.token_expires_at) + ")"));
  }
  if (!role.empty()) {
    if (auto parsed = auth::parse_role(role, "role"); !parsed) return error_response(parsed.error());
    if (project.empty()) return error_response(Error::invalid_argument("project", "", "a role is granted in a project"));
  }
  model::ApiToken token;
  token.meta.name = auth::random_hex(16);
  token.user = user;
  token.project = project;
  token.expires_at = call.now + *ttl;
  token.created_by = call.caller.user;
  std::vector<store::Op> ops{store::Op::create(kind::kApiTokens, token.meta.name, to_json(token).dump())};
  bool known_user = false, project_exists = project.empty(), bound = false;
  ctx_.cache.read([&](const ObjectCache& c) {
    known_user = c.users.get(user).object != nullptr;
    if (!project.empty()) project_exists = c.projects.get(project).object != nullptr;
    bound = c.role_bindings.get(project + "." + user).object != nullptr;
    return 0;
  });
  if (!project_exists) return error_response(Error::not_found("project", project, "no such project"));
  if (!known_user) {
    model::User u;
    u.meta.name = user;
    ops.push_back(store::Op::create(kind::kUsers, user, to_json(u).dump()));
  }
  if (!role.empty() && !bound) {
    model::RoleBinding rb;
    rb.meta.name = project + "." + user;
    rb.user = user;
    rb.project = project;
    rb.role = role;
    ops.push_back(store::Op::create(kind::kRoleBindings, rb.meta.name, to_json(rb).dump()));
  }
  auto committed = commit(call, std::move(ops), "tokens.create", user,
                          {{"token_id", token.meta.name}, {"project", project}, {"ttl", format_duration(*ttl)}, {"role", role}});
  if (!committed) return error_response(committed.error());
  auth::MintRequest mint{user, project, token.meta.name, *ttl};
  std::string jwt = auth::mint_hs256(mint, ctx_.signing, call.now);
  token.meta.revision = committed->revision;
  return json_response(201, {{"token", jwt}, {"record", to_json(token)}});
}

net::Response Api::list_tokens(const Call& call) {
  std::vector<model::ApiToken> items;
  ctx_.cache.read([&](const ObjectCache& c) {
    c.api_tokens.for_each([&](const std::string&, const model::ApiToken& t, int64_t) {
      if (call.caller.admin() || t.user == call.caller.user) items.push_back(t);
    });
    return 0;
  });
  return json_response(200, {{"items", items_json(items)}});
}

net::Response Api::revoke_token(const Call& call) {
  const std::string& id = call.param("id");
  auto cached = ctx_.cache.read([&](const ObjectCache& c) { return c.api_tokens.get(id); });
  if (!cached.object || (!call.caller.admin() && cached.object->user != call.caller.user)) {
    return error_response(Error::not_found("token", id, "no such token"));
  }
  model::ApiToken token = *cached.object;
  token.revoked = true;
  token.meta.revision = 0;
  auto committed = commit(call, {store::Op::update(kind::kApiTokens, id, to_json(token).dump(), cached.revision)},
                          "tokens.revoke", id, {{"user", token.user}});
  if (!committed) return error_response(committed.error());
  token.meta.revision = committed->revision;
  return json_response(200, to_json(token));
}

net::Response Api::create_join_token(const Call& call) {
  if (!call.caller.admin()) {
    audit_refusal(call, "jointokens.create", "", admins_only("create join tokens"));
    return error_response(admins_only("create join tokens"));
  }
  auto body = object_body(call.request.body.empty() ? "{}" : call.request.body, "JoinToken");
  if (!body) return error_response(body.error());
  auto ttl = ttl_of(*body, kDay);
  if (!ttl) return error_response(ttl.error());
  model::JoinToken token;
  token.meta.name = auth::random_hex(8);
  std::string secret = auth::random_hex(32);
  token.secret_sha256 = auth::sha256_hex(secret);
  token.expires_at = call.now + *ttl;
  token.created_by = call.caller.user;
  if (body->contains("max_uses")) {
    const Json& m = (*body)["max_uses"];
    if (!m.is_number_integer() || m.get<int64_t>() < 1) return error_response(Error::invalid_argument("max_uses", m.dump(), "expected an integer >= 1"));
    token.max_uses = m.get<int64_t>();
  }
  auto committed = commit(call, {store::Op::create(kind::kJoinTokens, token.meta.name, to_json(token).dump())},
                          "jointokens.create", token.meta.name, {{"ttl", format_duration(*ttl)}});
  if (!committed) return error_response(committed.error());
  token.meta.revision = committed->revision;
  return json_response(201, {{"token", token.meta.name + "." + secret}, {"record", to_json(token)}});
}

net::Response Api::list_join_tokens(const Call& call) {
  if (!call.caller.admin()) return error_response(admins_only("list join tokens"));
  std::vector<model::JoinToken> items;
  ctx_.cache.read([&](const ObjectCache& c) {
    c.join_tokens.for_each([&](const std::string&, const model::JoinToken& t, int64_t) { items.push_back(t); });
    return 0;
  });
  return json_response(200, {{"items", items_json(items)}});
}

net::Response Api::revoke_join_token(const Call& call) {
  const std::string& id = call.param("id");
  if (!call.caller.admin()) return error_response(admins_only("revoke join tokens"));
  auto cached = ctx_.cache.read([&](const ObjectCache& c) { return c.join_tokens.get(id); });
  if (!cached.object) return error_response(Error::not_found("join token", id, "no such join token"));
  model::JoinToken token = *cached.object;
  token.revoked = true;
  token.meta.revision = 0;
  auto committed = commit(call, {store::Op::update(kind::kJoinTokens, id, to_json(token).dump(), cached.revision)},
                          "jointokens.revoke", id);
  if (!committed) return error_response(committed.error());
  return json_response(200, to_json(token));
}

net::Response Api::whoami(const Call& call) {
  Json roles = Json::object();
  for (const auto& [project, role] : call.caller.bindings.by_project) roles[project] = auth::to_string(role);
  Json out = {{"user", call.caller.user}, {"roles", roles}, {"default_project", call.caller.default_project}};
  if (call.caller.is_node()) out["node"] = call.caller.node;
  return json_response(200, out);
}

}  // namespace cnlab::server
