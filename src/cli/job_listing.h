// What the look-around commands (ps, describe, nodes, gpus, quota) share: who the caller is, and
// every job of a query, read page by page. Private to src/cli.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "cli/client_config.h"
#include "common/json_reader.h"
#include "common/result.h"
#include "net/net.h"

namespace cnlab::cli {

// GET /v1/whoami.
struct Me {
  std::string user;
  std::string default_project;
  std::map<std::string, std::string> roles;  // project (or "*") -> role
  bool admin() const;                         // admin on "*": a cluster admin
};
Result<Me> whoami(net::Client& client);

// GET `target`, which must answer 2xx JSON; otherwise the server's error.
Result<Json> get_json(net::Client& client, const std::string& target);

// "spec.user=alice" -> "spec.user%3Dalice": every byte but unreserved ones percent-encoded.
std::string url_encode(std::string_view text);

struct JobQuery {
  std::string project;  // "" = every project the caller may see
  std::string phase;    // "" = every phase
  std::string user;     // "" = every user
};

// Every job matching, in pages of 5000. A cluster admin's list pages across projects; anyone else
// pages inside each project they see (the API requires it), and a project they cannot see is a
// kNotFound naming it. Jobs come project by project, each in id order.
Result<std::vector<Json>> list_jobs(net::Client& client, const Me& me, const JobQuery& query);

// Every job matching, as GET /v1/jobs?view=summary lists them: one request, flat items {"name",
// "project", "user", "gpu", "phase", "nodes", "submitted_at", ...} in id order, no paging. The
// server applies the caller's visibility; a project they cannot see is a kNotFound naming
// --project. What ps and `ps -o name` show; `-o json` keeps the full objects of list_jobs.
Result<std::vector<Json>> list_job_summaries(net::Client& client, const JobQuery& query);

// job[a][b] as a string without a copy; "" when absent or not a string.
std::string_view field(const Json& json, const char* a, const char* b);
// job[a][b] as an RFC 3339 time; Time{} when absent or malformed.
Time time_field(const Json& json, const char* a, const char* b);

// Exits the process with `report(error)`'s code after printing it: the end of every failing command.
[[noreturn]] void fail(const Error& error);

// Prints `json` as scripts read it (two-space indent, a newline) and exits 0.
[[noreturn]] void print_json_and_exit(const Json& json);

}  // namespace cnlab::cli
