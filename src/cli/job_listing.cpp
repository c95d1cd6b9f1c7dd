#include "cli/job_listing.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <optional>

namespace cnlab::cli {

bool Me::admin() const {
  auto it = roles.find("*");
  return it != roles.end() && it->second == "admin";
}

Result<Json> get_json(net::Client& client, const std::string& target) {
  auto response = client.request("GET", target);
  if (!response) return response.error();
  if (response->status < 200 || response->status >= 300) return net::error_from_response(response->status, response->body, "");
  Json json = Json::parse(response->body, nullptr, false);
  if (json.is_discarded()) return Error::internal("GET " + target + ": the server answered with something that is not JSON");
  return json;
}

Result<Me> whoami(net::Client& client) {
  auto json = get_json(client, "/v1/whoami");
  if (!json) return json.error();
  Me me;
  me.user = json->value("user", "");
  me.default_project = json->value("default_project", "");
  if (json->contains("roles") && (*json)["roles"].is_object()) {
    for (const auto& [project, role] : (*json)["roles"].items()) {
      if (role.is_string()) me.roles[project] = role.get<std::string>();
    }
  }
  return me;
}

std::string url_encode(std::string_view text) {
  static const char* const kHex = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size() * 3);
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

namespace {

constexpr int kPage = 5000;

// The page's continue token when the body starts with it, as the server writes it (keys sorted:
// "continue" before "items"); nullopt when it cannot tell without parsing the page.
std::optional<std::string> leading_continue(const std::string& body) {
  static constexpr std::string_view kKey = "{\"continue\":\"";
  if (body.compare(0, kKey.size(), kKey) != 0) {
    if (body.compare(0, 10, "{\"items\":[") == 0 && body.find("\"continue\"") == std::string::npos) return std::string();
    return std::nullopt;
  }
  size_t end = body.find('"', kKey.size());
  if (end == std::string::npos) return std::nullopt;
  std::string token = body.substr(kKey.size(), end - kKey.size());
  if (token.find('\\') != std::string::npos) return std::nullopt;  // escaped: let the parser read it
  return token;
}

// Pages through GET /v1/jobs with `filters` ("&project=..."), appending to `out`. A page is parsed
// on a second thread while the next one is fetched: the server takes about as long to write a page
// of 5000 jobs as this client takes to parse one.
Status page_through(net::Client& client, const std::string& filters, std::vector<Json>& out) {
  std::string next;
  std::future<Result<Json>> parsing;
  auto collect = [&]() -> Status {
    if (!parsing.valid()) return Status::ok();
    Result<Json> page = parsing.get();
    if (!page) return page.error();
    if (page->contains("items") && (*page)["items"].is_array()) {
      Json& items = (*page)["items"];
      out.reserve(out.size() + items.size());
      for (Json& item : items) out.push_back(std::move(item));
    }
    return Status::ok();
  };
  do {
    std::string target = "/v1/jobs?limit=" + std::to_string(kPage) + filters;
    if (!next.empty()) target += "&continue=" + url_encode(next);
    auto response = client.request("GET", target);
    if (!response) return response.error();
    if (response->status < 200 || response->status >= 300) return net::error_from_response(response->status, response->body, "");
    if (auto status = collect(); !status) return status;
    auto body = std::make_shared<std::string>(std::move(response->body));
    std::optional<std::string> token = leading_continue(*body);
    auto parse = [body, target]() -> Result<Json> {
      Json json = Json::parse(*body, nullptr, false);
      if (json.is_discarded()) return Error::internal("GET " + target + ": the server answered with something that is not JSON");
      return json;
    };
    if (token) {
      parsing = std::async(std::launch::async, parse);
      next = *token;
    } else {
      Result<Json> page = parse();
      if (!page) return page.error();
      next = page->value("continue", "");
      parsing = std::async(std::launch::deferred, [page = std::move(page)]() mutable { return std::move(page); });
    }
  } while (!next.empty());
  return collect();
}

}  // namespace

Result<std::vector<Json>> list_jobs(net::Client& client, const Me& me, const JobQuery& query) {
  std::string filters;
  if (!query.phase.empty()) filters += "&phase=" + url_encode(query.phase);
  if (!query.user.empty()) filters += "&fieldSelector=" + url_encode("spec.user=" + query.user);
  std::vector<Json> jobs;
  if (!query.project.empty() || me.admin()) {
    std::string scoped = query.project.empty() ? filters : "&project=" + url_encode(query.project) + filters;
    if (auto status = page_through(client, scoped, jobs); !status) {
      Error error = status.error();
      // "project \"nlp\": no such project" reads better as the flag the user typed.
      if (error.code == ErrorCode::kNotFound && error.field == "project") error.field = "--project";
      return error;
    }
    return jobs;
  }
  auto projects = get_json(client, "/v1/projects");
  if (!projects) return projects.error();
  for (const Json& p : (*projects)["items"]) {
    std::string name = p["metadata"].value("name", "");
    if (auto status = page_through(client, "&project=" + url_encode(name) + filters, jobs); !status) {
      return status.error();
    }
  }
  return jobs;
}

Result<std::vector<Json>> list_job_summaries(net::Client& client, const JobQuery& query) {
  std::string target = "/v1/jobs?view=summary";
  if (!query.project.empty()) target += "&project=" + url_encode(query.project);
  if (!query.phase.empty()) target += "&phase=" + url_encode(query.phase);
  if (!query.user.empty()) target += "&fieldSelector=" + url_encode("spec.user=" + query.user);
  auto page = get_json(client, target);
  if (!page) {
    Error error = page.error();
    if (error.code == ErrorCode::kNotFound && error.field == "project") error.field = "--project";
    return error;
  }
  std::vector<Json> jobs;
  if (auto items = page->find("items"); items != page->end() && items->is_array()) {
    jobs.reserve(items->size());
    for (Json& item : *items) jobs.push_back(std::move(item));
  }
  return jobs;
}

std::string_view field(const Json& json, const char* a, const char* b) {
  if (!json.is_object()) return {};
  auto outer = json.find(a);
  if (outer == json.end() || !outer->is_object()) return {};
  auto inner = outer->find(b);
  if (inner == outer->end() || !inner->is_string()) return {};
  return inner->get_ref<const std::string&>();
}

Time time_field(const Json& json, const char* a, const char* b) {
  std::string_view text = field(json, a, b);
  if (text.empty()) return Time{};
  auto time = parse_rfc3339(text, b);
  return time ? *time : Time{};
}

void fail(const Error& error) {
  std::fflush(stdout);
  std::exit(report(error));
}

void print_json_and_exit(const Json& json) {
  std::string text = json.dump(2);
  text += '\n';
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::exit(0);
}

}  // namespace cnlab::cli
