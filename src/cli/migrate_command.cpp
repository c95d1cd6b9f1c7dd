// `cnlab checkpoint JOB` (take a checkpoint of a running job now; it runs on; waits until it is
// stored, or says why it was not, unless --no-wait) and `cnlab migrate JOB [--to NODE]` (move a
// running job to another node live; waits until it runs there, or says why it stayed, unless
// --no-wait).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "cli/arguments.h"
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

// What a wait for an outcome saw: the first event after the request of one of the outcome types,
// or the job's end (phase) first, or neither within the timeout.
struct Outcome {
  Json event;         // null when none came
  std::string ended;  // the job's phase when it ended first
};

// Polls job `id` until an event after its first `seen` has one of `types`, or the job has ended.
// `each` sees every version of the job fetched (to print progress).
Outcome wait_for_outcome(net::Client& api, const std::string& id, size_t seen, std::chrono::seconds timeout,
                         const std::vector<std::string>& types, const std::function<void(const Json&)>& each) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(200ms);
    auto got = api.request("GET", "/v1/jobs/" + id);
    if (!got || got->status != 200) continue;
    Json now = Json::parse(got->body, nullptr, false);
    if (!now.is_object()) continue;
    if (each) each(now);
    const Json events = now["status"].value("events", Json::array());
    for (size_t i = seen; i < events.size(); ++i) {
      if (std::find(types.begin(), types.end(), events[i].value("type", "")) != types.end()) return {events[i], ""};
    }
    const std::string phase = now["status"].value("phase", "");
    if (phase == "Succeeded" || phase == "Failed" || phase == "Cancelled") return {nullptr, phase};
  }
  return {};
}

// How a command words what its wait came to.
struct OutcomeWords {
  const char* succeeded;  // the event type that is success
  const char* done;       // between the job and that event's reason ("job J checkpointed: ...")
  const char* failed;     // between the job and the failure event's reason
  const char* ended;      // after "job J ended (Phase)", when it ended first
  const char* nothing;    // what did not come within the timeout
};

// Prints the outcome (success on stdout, anything else on stderr) and returns the exit code.
int report_outcome(const std::string& id, const Outcome& outcome, const OutcomeWords& words,
                   std::chrono::seconds timeout) {
  const std::string reason = outcome.event.is_object() ? outcome.event.value("reason", "") : "";
  if (outcome.event.is_object() && outcome.event.value("type", "") == words.succeeded) {
    std::printf("job %s%s%s\n", id.c_str(), words.done, reason.c_str());
    return kExitOk;
  }
  if (outcome.event.is_object()) {
    std::fprintf(stderr, "cnlab: job %s%s%s\n", id.c_str(), words.failed, reason.c_str());
  } else if (!outcome.ended.empty()) {
    std::fprintf(stderr, "cnlab: job %s ended (%s) %s\n", id.c_str(), outcome.ended.c_str(), words.ended);
  } else {
    std::fprintf(stderr, "cnlab: job %s: %s within %llds (cnlab describe %s)\n", id.c_str(), words.nothing,
                 static_cast<long long>(timeout.count()), id.c_str());
  }
  return kExitFailed;
}

int checkpoint(const ClientFlags& flags, const std::string& id, bool wait, std::chrono::seconds timeout) {
  auto client = connect(flags);
  if (!client) return report(client.error());
  net::Client& api = **client;
  auto job = post(api, "/v1/jobs/" + id + "/checkpoint", Json::object());
  if (!job) return report(job.error());
  std::printf("checkpoint of job %s requested: its agent takes it, the job running on\n", id.c_str());
  std::fflush(stdout);
  if (!wait) return kExitOk;
  const Outcome outcome = wait_for_outcome(api, id, event_count(*job), timeout, {"Checkpointed", "CheckpointFailed"}, {});
  return report_outcome(id, outcome, {"Checkpointed", " checkpointed: ", ": checkpoint ",
                                      "before its checkpoint was taken", "no checkpoint"},
                        timeout);
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
  std::string progress;  // the source's latest word, printed once each time it changes
  auto print_progress = [&](const Json& now) {
    const std::string said = now["status"].value("migration", Json::object()).value("progress", "");
    if (!said.empty() && said != progress) {
      progress = said;
      std::printf("  %s\n", progress.c_str());
      std::fflush(stdout);
    }
  };
  const Outcome outcome =
      wait_for_outcome(api, id, event_count(*job), timeout, {"Migrated", "MigrationFailed"}, print_progress);
  return report_outcome(id, outcome, {"Migrated", " ", " did not migrate: ", "before it migrated",
                                      "no outcome of the migration"},
                        timeout);
}

}  // namespace

void add_migrate_commands(CLI::App& app, std::shared_ptr<ClientFlags> flags) {
  auto id = std::make_shared<std::string>();
  auto checkpoint_no_wait = std::make_shared<bool>(false);
  auto checkpoint_timeout = std::make_shared<int64_t>(300);
  auto* checkpoint_app = app.add_subcommand("checkpoint", "Take a transparent checkpoint of a running job now");
  checkpoint_app->add_option("JOB", *id, "Job id (train-6f3ae726)")->required()->check(job_id());
  checkpoint_app->add_flag("--no-wait", *checkpoint_no_wait, "Return once the checkpoint is requested");
  checkpoint_app->add_option("--timeout", *checkpoint_timeout, "Seconds to wait for the outcome")
      ->capture_default_str()
      ->check(positive_seconds());
  checkpoint_app->footer("Example: cnlab checkpoint train-6f3ae726");
  checkpoint_app->callback([flags, id, checkpoint_no_wait, checkpoint_timeout] {
    std::exit(checkpoint(*flags, *id, !*checkpoint_no_wait, std::chrono::seconds(*checkpoint_timeout)));
  });

  auto migrate_id = std::make_shared<std::string>();
  auto to = std::make_shared<std::string>();
  auto no_wait = std::make_shared<bool>(false);
  auto timeout = std::make_shared<int64_t>(300);
  auto* migrate_app = app.add_subcommand("migrate", "Move a running job to another node, live");
  migrate_app->add_option("JOB", *migrate_id, "Job id (train-6f3ae726)")->required()->check(job_id());
  migrate_app
      ->add_option("--to", *to,
                   "The node to move it to (default: of the nodes that can take it, the one with the most free CPU)")
      ->check(node_name());
  migrate_app->add_flag("--no-wait", *no_wait, "Return once the migration is requested");
  migrate_app->add_option("--timeout", *timeout, "Seconds to wait for the outcome")
      ->capture_default_str()
      ->check(positive_seconds());
  migrate_app->footer("Example: cnlab migrate train-6f3ae726 --to gpu-node-7");
  migrate_app->callback([flags, migrate_id, to, no_wait, timeout] {
    std::exit(migrate(*flags, *migrate_id, *to, !*no_wait, std::chrono::seconds(*timeout)));
  });
}

}  // namespace cnlab::cli
