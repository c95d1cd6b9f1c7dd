// `cnlab cancel JOB`: asks the server to cancel a job and says what happened: cancelled at once
// (it was queued), stopping (its agent stops the process), or nothing to do (it had ended).
#include <cstdio>
#include <memory>

#include "cli/arguments.h"
#include "cli/cli.h"
#include "cli/client_config.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"

namespace cnlab::cli {
namespace {

std::string nodes_of(const Json& status) {
  std::string nodes;
  for (const auto& binding : status.value("placement", Json::array())) {
    nodes += (nodes.empty() ? "" : ", ") + binding.value("node", std::string());
  }
  return nodes;
}

int cancel(const ClientFlags& flags, const std::string& id, bool json) {
  auto client = connect(flags);
  if (!client) return report(client.error());
  net::Client& api = **client;
  auto answer = api.request("POST", "/v1/jobs/" + id + "/cancel", "{}", {{"content-type", "application/json"}});
  if (!answer) return report(answer.error());
  if (answer->status == 409) {
    // Already ended: nothing to cancel, which is what was wanted.
    auto got = api.request("GET", "/v1/jobs/" + id);
    Json job = got && got->status == 200 ? Json::parse(got->body, nullptr, false) : Json();
    if (json) {
      std::printf("%s\n", (job.is_object() ? job : Json::parse(answer->body, nullptr, false)).dump(2).c_str());
    } else {
      std::string phase = job.is_object() ? job["status"].value("phase", "") : "";
      std::printf("job %s had already ended%s; nothing to cancel\n", id.c_str(), phase.empty() ? "" : (" (" + phase + ")").c_str());
    }
    return kExitOk;
  }
  if (answer->status != 200) return report(net::error_from_response(answer->status, answer->body, ""));
  Json job = Json::parse(answer->body, nullptr, false);
  if (!job.is_object()) return report(Error::internal("the server answered with something that is not a job"));
  if (json) {
    std::printf("%s\n", job.dump(2).c_str());
    return kExitOk;
  }
  const Json& status = job["status"];
  std::string phase = status.value("phase", "");
  if (phase == "Cancelled") {
    std::printf("job %s cancelled (it was queued)\n", id.c_str());
  } else if (status.value("cancel_requested", false)) {
    std::printf("job %s is stopping: its agent on %s stops the process (it ends Cancelled)\n", id.c_str(),
                nodes_of(status).c_str());
  } else {
    std::printf("job %s: %s\n", id.c_str(), phase.c_str());
  }
  return kExitOk;
}

}  // namespace

void add_cancel_command(CLI::App& app, std::shared_ptr<ClientFlags> flags) {
  auto id = std::make_shared<std::string>();
  auto output = std::make_shared<std::string>("text");
  auto* cancel_app = app.add_subcommand("cancel", "Cancel a job: a queued one at once, a running one is stopped");
  cancel_app->add_option("JOB", *id, "Job id (train-6f3ae726)")->required()->check(job_id());
  cancel_app->add_option("-o,--output", *output, "text, or json for the job after the change")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cancel_app->footer("Example: cnlab cancel train-6f3ae726");
  cancel_app->callback([flags, id, output] { std::exit(cancel(*flags, *id, *output == "json")); });
}

}  // namespace cnlab::cli
