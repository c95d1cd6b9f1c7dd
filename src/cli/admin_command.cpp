// `cnlab admin ...`: projects, users, tokens, join tokens, role bindings, quotas and nodes. A command that
// creates a credential prints it alone on its last line, so scripts can take `tail -1`.
#include <cstdio>
#include <memory>
#include <vector>

#include "cli/arguments.h"
#include "cli/cli.h"
#include "cli/client_config.h"
#include "cli/commands.h"
#include "cli/output.h"

namespace cnlab::cli {
namespace {

void print_json(const Json& json) { std::printf("%s\n", json.dump(2).c_str()); }

[[noreturn]] void finish(const Result<Json>& result, const std::function<void(const Json&)>& show) {
  if (!result) std::exit(report(result.error()));
  show(*result);
  std::exit(0);
}

std::string text_of(const Json& value) {
  if (value.is_null()) return "-";
  if (value.is_string()) return value.get<std::string>().empty() ? "-" : value.get<std::string>();
  return value.dump();
}

// `admin ... list`: GET `target`; a table of `columns` (each a header and a JSON pointer into an
// item, e.g. "/spec/user"), or with -o json the server's answer as it came.
void add_list(CLI::App& parent, const std::shared_ptr<ClientFlags>& flags, const std::string& what, const std::string& target,
              std::vector<std::pair<std::string, std::string>> columns) {
  auto* list = parent.add_subcommand("list", "List " + what);
  auto output = std::make_shared<std::string>();
  add_output_option(*list, *output, /*allow_name=*/false);
  list->footer("Example:\n  cnlab " + parent.get_parent()->get_name() + " " + parent.get_name() + " list -o json");
  list->callback([flags, target, columns, output] {
    auto format = parse_output_format(*output, /*allow_name=*/false);
    if (!format) std::exit(report(format.error()));
    finish(call_json(*flags, "GET", target), [&](const Json& j) {
      if (*format == OutputFormat::kJson) return print_json(j);
      std::vector<Table::Column> headers;
      for (const auto& [header, pointer] : columns) headers.push_back({header, Table::Align::kLeft, header == "DESCRIPTION"});
      Table table(std::move(headers));
      for (const Json& item : j.value("items", Json::array())) {
        table.row();
        for (const auto& [header, pointer] : columns) {
          Json::json_pointer at(pointer);
          table.cell(item.contains(at) ? text_of(item[at]) : "-");
        }
      }
      table.print(stdout);
    });
  });
}

}  // namespace

void add_admin_commands(CLI::App& app, std::shared_ptr<ClientFlags> flags) {
  auto* admin = app.add_subcommand("admin", "Administer the cluster: projects, users, tokens, quotas, nodes");
  admin->require_subcommand(1);
  admin->footer("Example:\n  cnlab admin project create vision\n  cnlab admin token create --user alice --project vision --role member\n  cnlab admin quota list -o json");

  auto* project = admin->add_subcommand("project", "Projects")->require_subcommand(1);
  auto* project_create = project->add_subcommand("create", "Create a project");
  auto name = std::make_shared<std::string>();
  auto description = std::make_shared<std::string>();
  auto share = std::make_shared<double>(1.0);
  project_create->add_option("NAME", *name, "Project name")->required();
  project_create->add_option("--description", *description, "What the project is for");
  project_create->add_option("--share", *share, "Fair-share weight against other projects")->capture_default_str();
  project_create->callback([flags, name, description, share] {
    Json body = {{"kind", "Project"}, {"metadata", {{"name", *name}}}, {"spec", {{"share", *share}}}};
    if (!description->empty()) body["spec"]["description"] = *description;
    finish(call_json(*flags, "POST", "/v1/projects", body), [](const Json& j) {
      std::printf("project %s created\n", j["metadata"].value("name", "").c_str());
    });
  });
  add_list(*project, flags, "projects", "/v1/projects",
           {{"NAME", "/metadata/name"}, {"SHARE", "/spec/share"}, {"DESCRIPTION", "/spec/description"}});

  auto* user = admin->add_subcommand("user", "Users")->require_subcommand(1);
  auto* user_create = user->add_subcommand("create", "Create a user");
  auto user_name = std::make_shared<std::string>();
  user_create->add_option("NAME", *user_name, "User name")->required();
  user_create->callback([flags, user_name] {
    finish(call_json(*flags, "POST", "/v1/users", {{"kind", "User"}, {"metadata", {{"name", *user_name}}}}),
           [](const Json& j) { std::printf("user %s created\n", j["metadata"].value("name", "").c_str()); });
  });

  add_list(*user, flags, "users", "/v1/users",
           {{"NAME", "/metadata/name"}, {"DISPLAY NAME", "/spec/display_name"}, {"EMAIL", "/spec/email"}, {"DISABLED", "/spec/disabled"}});

  auto* token = admin->add_subcommand("token", "API tokens")->require_subcommand(1);
  auto* token_create = token->add_subcommand("create", "Mint a token; prints it on the last line");
  auto t_user = std::make_shared<std::string>();
  auto t_project = std::make_shared<std::string>();
  auto t_ttl = std::make_shared<std::string>("30d");
  auto t_role = std::make_shared<std::string>();
  token_create->add_option("--user", *t_user, "Whom the token speaks for")->required();
  token_create->add_option("--project", *t_project, "Default project of the token");
  token_create->add_option("--ttl", *t_ttl, "Lifetime, e.g. 30d")->capture_default_str();
  token_create->add_option("--role", *t_role, "Also grant this role in --project (admin, project-admin, member, viewer)");
  token_create->callback([flags, t_user, t_project, t_ttl, t_role] {
    Json body = {{"user", *t_user}, {"ttl", *t_ttl}};
    if (!t_project->empty()) body["project"] = *t_project;
    if (!t_role->empty()) body["role"] = *t_role;
    finish(call_json(*flags, "POST", "/v1/tokens", body), [](const Json& j) {
      std::printf("token %s for %s, expires %s\n", j["record"]["metadata"].value("name", "").c_str(),
                  j["record"]["spec"].value("user", "").c_str(), j["record"]["spec"].value("expires_at", "").c_str());
      std::printf("%s\n", j.value("token", "").c_str());
    });
  });
  auto* token_revoke = token->add_subcommand("revoke", "Revoke a token by its id");
  auto t_id = std::make_shared<std::string>();
  token_revoke->add_option("ID", *t_id, "Token id (jti)")
      ->required()
      ->check(object_name("token id", "cnlab admin token list shows them"));
  token_revoke->callback([flags, t_id] {
    finish(call_json(*flags, "POST", "/v1/tokens/" + *t_id + "/revoke", Json::object()),
           [t_id](const Json&) { std::printf("token %s revoked\n", t_id->c_str()); });
  });
  add_list(*token, flags, "token records (yours; an admin: all)", "/v1/tokens",
           {{"ID", "/metadata/name"}, {"USER", "/spec/user"}, {"PROJECT", "/spec/project"}, {"EXPIRES", "/spec/expires_at"},
            {"REVOKED", "/spec/revoked"}, {"CREATED BY", "/spec/created_by"}});

  auto* join = admin->add_subcommand("join-token", "Join tokens for node agents")->require_subcommand(1);
  auto* join_create = join->add_subcommand("create", "Create a join token; prints it on the last line");
  auto j_ttl = std::make_shared<std::string>("24h");
  auto j_uses = std::make_shared<int64_t>(0);
  join_create->add_option("--ttl", *j_ttl, "How long it may be used")->capture_default_str();
  join_create->add_option("--max-uses", *j_uses, "How many nodes may join with it (0: any number)");
  join_create->callback([flags, j_ttl, j_uses] {
    Json body = {{"ttl", *j_ttl}};
    if (*j_uses > 0) body["max_uses"] = *j_uses;
    finish(call_json(*flags, "POST", "/v1/join-tokens", body), [](const Json& j) {
      std::printf("join token %s, expires %s\n", j["record"]["metadata"].value("name", "").c_str(),
                  j["record"]["spec"].value("expires_at", "").c_str());
      std::printf("%s\n", j.value("token", "").c_str());
    });
  });
  auto* join_revoke = join->add_subcommand("revoke", "Revoke a join token by its id");
  auto j_id = std::make_shared<std::string>();
  join_revoke->add_option("ID", *j_id, "Join token id")
      ->required()
      ->check(object_name("join token id", "cnlab admin join-token list shows them"));
  join_revoke->callback([flags, j_id] {
    finish(call_json(*flags, "POST", "/v1/join-tokens/" + *j_id + "/revoke", Json::object()),
           [j_id](const Json&) { std::printf("join token %s revoked\n", j_id->c_str()); });
  });

  add_list(*join, flags, "join tokens", "/v1/join-tokens",
           {{"ID", "/metadata/name"}, {"EXPIRES", "/spec/expires_at"}, {"MAX USES", "/spec/max_uses"}, {"USES", "/status/uses"},
            {"REVOKED", "/spec/revoked"}, {"CREATED BY", "/spec/created_by"}});

  auto* binding = admin->add_subcommand("rolebinding", "Role bindings")->require_subcommand(1);
  auto* binding_create = binding->add_subcommand("create", "Grant a role in a project ('*' for the whole cluster)");
  auto b_user = std::make_shared<std::string>();
  auto b_project = std::make_shared<std::string>();
  auto b_role = std::make_shared<std::string>("member");
  binding_create->add_option("--user", *b_user, "User")->required();
  binding_create->add_option("--project", *b_project, "Project, or '*'")->required();
  binding_create->add_option("--role", *b_role, "admin, project-admin, member or viewer")->capture_default_str();
  binding_create->callback([flags, b_user, b_project, b_role] {
    Json body = {{"kind", "RoleBinding"}, {"spec", {{"user", *b_user}, {"project", *b_project}, {"role", *b_role}}}};
    finish(call_json(*flags, "POST", "/v1/rolebindings", body),
           [](const Json& j) { std::printf("role binding %s created\n", j["metadata"].value("name", "").c_str()); });
  });

  add_list(*binding, flags, "role bindings (yours, and all in projects you administer)", "/v1/rolebindings",
           {{"NAME", "/metadata/name"}, {"USER", "/spec/user"}, {"PROJECT", "/spec/project"}, {"ROLE", "/spec/role"}});

  add_node_commands(*admin, flags);  // node_command.cpp

  auto* quota = admin->add_subcommand("quota", "Quotas")->require_subcommand(1);
  auto* quota_set = quota->add_subcommand("set", "Create or replace a quota");
  auto q_name = std::make_shared<std::string>();
  auto q_spec = std::make_shared<std::string>();
  quota_set->add_option("NAME", *q_name, "Quota name")->required()->check(object_name("quota name", "such as vision-gpus"));
  quota_set->add_option("--spec", *q_spec,
                        "The quota's spec as JSON, e.g. '{\"project\":\"vision\",\"gpus\":4,\"concurrent_jobs\":10}'")
      ->required();
  quota_set->callback([flags, q_name, q_spec] {
    Json spec = Json::parse(*q_spec, nullptr, false);
    if (!spec.is_object()) std::exit(report(Error::invalid_argument("--spec", *q_spec, "expected a JSON object")));
    Json body = {{"kind", "Quota"}, {"metadata", {{"name", *q_name}}}, {"spec", spec}};
    finish(call_json(*flags, "PUT", "/v1/quotas/" + *q_name, body),
           [q_name](const Json&) { std::printf("quota %s set\n", q_name->c_str()); });
  });
  add_list(*quota, flags, "quotas (cnlab quota shows them with usage)", "/v1/quotas",
           {{"NAME", "/metadata/name"}, {"PROJECT", "/spec/project"}, {"USER", "/spec/user"},
            {"CONCURRENT_JOBS", "/spec/concurrent_jobs"}, {"GPUS", "/spec/gpus"}, {"BLOCKS_PER_MODEL", "/spec/blocks_per_model"},
            {"GPU_HOURS", "/spec/gpu_hours"}, {"WINDOW", "/spec/gpu_hours_window"}, {"BORROWING", "/spec/borrowing"}});
}

}  // namespace cnlab::cli
