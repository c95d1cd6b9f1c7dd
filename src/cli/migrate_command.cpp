// `cnlab checkpoint JOB` (take a transparent checkpoint of a running job now; it runs on) and
// `cnlab migrate JOB [--to NODE]` (move a running job to another node live; waits until it runs
// there, or says why it stayed, unless --no-wait).
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "cli/cli.h"
#include "cli/client_config.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"

namespace cnlab::cli {
namespace {

using namespace std::chrono_literals;

Result<Json> post(net::Client& api, const std::string& target, const Json& body) {
  auto answer = api.request("POST", target, body.dump(), {{"content-type", "application/json"}});
  if (!answer) return answer.error();
  if (answer->status != 200 && answer->status != 202) {
    return net::error_from_response(answer->status, answer->body, "");
  }
  Json job = Json::parse(answer->body, nullptr, false);
  if (!job.is_object()) return Error::internal("the server answered with something that is not a job");
  return job;
}

size_t event_count(const Json& job) { return job["status"].value("events", Json::array()).size(); }

int checkpoint(const ClientFlags& flags, const std::string& id) {
  auto client = connect(flags);
  if (!client) return report(client.error());
  auto job = post(**client, "/v1/jobs/" + id + "/checkpoint", Json::object());
  if (!job) return report(job.error());
  std::printf("checkpoint of job %s requested: its agent dumps it, the job running on (cnlab describe %s lists it)\n",
              id.c_str(), id.c_str());
  return kExitOk;
}

int migrate(const ClientFlags& flags, const std::string& id, const std::string& to, bool wait,
            std::chrono::seconds timeout) {
  auto client = connect(flags);
  if (!client) return report(client.error());
  net::Client& api = **client;
  Json body = Json::object();
  if (!to.empty()) body["to"] = to;
  auto job = post(api, "/v1/jobs/" + id + "/migrate", body);
  if (!job) return report(job.error());
  const Json& migration = (*job)["status"].value("migration", Json::object());
  const std::string target = migration.value("to", to);
  std::printf("migration of job %s to %s requested\n", id.c_str(), target.c_str());
  std::fflush(stdout);
  if (!wait) return kExitOk;
  // The outcome is the first Migrated or MigrationFailed event after the request.
  const size_t seen = event_count(*job);
  std::string progress;  // the source's latest word, printed once each time it changes
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(200ms);
    auto got = api.request("GET", "/v1/jobs/" + id);
    if (!got || got->status != 200) continue;
    Json now = Json::parse(got->body, nullptr, false);
    if (!now.is_object()) continue;
    const std::string said = now["status"].value("migration", Json::object()).value("progress", "");
    if (!said.empty() && said != progress) {
      progress = said;
      std::printf("  %s\n", progress.c_str());
      std::fflush(stdout);
    }
    const Json events = now["status"].value("events", Json::array());
    for (size_t i = seen; i < events.size(); ++i) {
      const std::string type = events[i].value("type", "");
      const std::string reason = events[i].value("reason", "");
      if (type == "Migrated") {
        std::printf("job %s %s\n", id.c_str(), reason.c_str());
        return kExitOk;
      }
      if (type == "MigrationFailed") {
        std::fprintf(stderr, "cnlab: job %s did not migrate: %s\n", id.c_str(), reason.c_str());
        return kExitFailed;
      }
    }
  }
  std::fprintf(stderr, "cnlab: job %s: no outcome of the migration within %llds (cnlab describe %s)\n", id.c_str(),
               static_cast<long long>(timeout.count()), id.c_str());
  return kExitFailed;
}

}  // namespace

void add_migrate_commands(CLI::App& app, std::shared_ptr<ClientFlags> flags) {
  auto id = std::make_shared<std::string>();
  auto* checkpoint_app = app.add_subcommand("checkpoint", "Take a transparent checkpoint of a running job now");
  checkpoint_app->add_option("JOB", *id, "Job id (train-6f3ae726)")->required();
  checkpoint_app->footer("Example: cnlab checkpoint train-6f3ae726");
  checkpoint_app->callback([flags, id] { std::exit(checkpoint(*flags, *id)); });

  auto migrate_id = std::make_shared<std::string>();
  auto to = std::make_shared<std::string>();
  auto no_wait = std::make_shared<bool>(false);
  auto timeout = std::make_shared<int64_t>(300);
  auto* migrate_app = app.add_subcommand("migrate", "Move a running job to another node, live");
  migrate_app->add_option("JOB", *migrate_id, "Job id (train-6f3ae726)")->required();
  migrate_app->add_option("--to", *to, "The node to move it to (default: of the nodes that can take it, the one with the most free CPU)");
  migrate_app->add_flag("--no-wait", *no_wait, "Return once the migration is requested");
  migrate_app->add_option("--timeout", *timeout, "Seconds to wait for the outcome")->capture_default_str();
  migrate_app->footer("Example: cnlab migrate train-6f3ae726 --to gpu-node-7");
  migrate_app->callback([flags, migrate_id, to, no_wait, timeout] {
    std::exit(migrate(*flags, *migrate_id, *to, !*no_wait, std::chrono::seconds(*timeout)));
  });
}

}  // namespace cnlab::cli
