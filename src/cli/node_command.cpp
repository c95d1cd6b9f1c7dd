// `cnlab admin node cordon|drain|uncordon NAME`: Kubernetes' verbs. A drain here moves the node's
// checkpointable jobs live instead of evicting them and leaves the rest to finish there, or, with
// --requeue, requeues the rest as `kubectl drain` evicts them (docs/api.md, POST
// /v1/nodes/{name}/drain). `drain --wait` follows the drain to its end, as
// `kubectl drain` does: it prints how many jobs are left each time that changes, and exits 0 once
// none is; at --timeout it lists the jobs left, each with what it waits for, and exits 1.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "cli/arguments.h"
#include "cli/client_config.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/job_listing.h"
#include "cli/output.h"

namespace cnlab::cli {
namespace {

using namespace std::chrono_literals;

// What a job still on a draining node waits for: its move under way, why the drain leaves it
// there (its latest NotMovedForDrain event, when that is its latest event), or its turn.
std::string waits_for(const Json& job) {
  const Json& status = job["status"];
  if (status.contains("migration") && status["migration"].is_object()) {
    return "moving to " + status["migration"].value("to", "another node");
  }
  const Json events = status.value("events", Json::array());
  if (!events.empty() && events.back().value("type", "") == "NotMovedForDrain") return events.back().value("reason", "");
  if (status.value("phase", "") == "Scheduled") return "bound here, not started yet";
  return "its turn to move (at most 2 leave a node at once)";
}

// "  JOB: what it waits for", a line per job bound to `node` (Scheduled or Running), a line for
// the `releasing` jobs taken off it that are still stopping there, and one for the `migrating` jobs
// moved off it live that it holds frozen until they run on their target.
std::string jobs_left(net::Client& api, const std::string& node, int64_t releasing, int64_t migrating) {
  auto listed = get_json(api, "/v1/jobs?node=" + url_encode(node));
  if (!listed) return "  (the jobs could not be listed: " + listed.error().message + ")\n";
  std::string lines;
  for (const Json& job : listed->value("items", Json::array())) {
    const std::string phase = job["status"].value("phase", "");
    if (phase != "Scheduled" && phase != "Running") continue;
    lines += "  " + job["metadata"].value("name", "?") + ": " + waits_for(job) + "\n";
  }
  if (releasing > 0) {
    lines += "  and " + count_of(releasing, "job") + " taken off it, still stopping there and storing checkpoints\n";
  }
  if (migrating > 0) {
    lines += "  and " + count_of(migrating, "job") + " moved off it live, held frozen there until running on their target\n";
  }
  return lines;
}

// Polls the node until no job is bound to it; see the file's comment.
int wait_until_drained(const ClientFlags& flags, const std::string& node, std::chrono::seconds timeout) {
  auto client = connect(flags);
  if (!client) return report(client.error());
  net::Client& api = **client;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int64_t said = -1;  // the count last printed
  while (true) {
    auto got = get_json(api, "/v1/nodes/" + url_encode(node));
    if (!got) return report(got.error());
    const Json& status = (*got)["status"];
    const std::string phase = status.value("phase", "");
    const int64_t left = drain_jobs_left(status);
    if (phase != "Draining") {
      std::fprintf(stderr, "cnlab: node %s is no longer draining (%s) with %s left\n", node.c_str(), phase.c_str(),
                   count_of(left, "job").c_str());
      return kExitFailed;
    }
    if (left == 0) {
      std::printf("node %s drained: no jobs left\n", node.c_str());
      return kExitOk;
    }
    if (left != said) {
      std::printf("  %s left\n", count_of(left, "job").c_str());
      std::fflush(stdout);
      said = left;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      std::fprintf(stderr, "cnlab: node %s still has %s after %llds:\n%s", node.c_str(), count_of(left, "job").c_str(),
                   static_cast<long long>(timeout.count()),
                   jobs_left(api, node, status.value("releasing_jobs", int64_t{0}),
                             status.value("migrating_jobs", int64_t{0})).c_str());
      return kExitFailed;
    }
    std::this_thread::sleep_for(1s);
  }
}

}  // namespace

void add_node_commands(CLI::App& admin, std::shared_ptr<ClientFlags> flags) {
  auto* node = admin.add_subcommand("node", "Nodes: cordon, drain (moves its checkpointable jobs live), uncordon")
                   ->require_subcommand(1);
  for (const auto& [verb, help, done] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"cordon", "Take no new work on the node; its jobs run on", "cordoned: it takes no new work"},
           {"drain",
            "Take no new work, and move its running checkpointable jobs live to other nodes (the rest finish there, or "
            "with --requeue go back to the queue)",
            "draining: no new work; its checkpointable jobs move live to other nodes, the rest run to their end "
            "(cnlab ps --all shows them moving)"},
           {"uncordon", "Take new work again (ends a cordon or a drain)", "takes new work again"}}) {
    auto* command = node->add_subcommand(verb, help);
    auto name = std::make_shared<std::string>();
    auto wait = std::make_shared<bool>(false);
    auto requeue = std::make_shared<bool>(false);
    auto timeout = std::make_shared<int64_t>(600);
    command->add_option("NAME", *name, "Node name (cnlab nodes lists them)")
        ->required()
        ->check(node_name());
    if (verb == "drain") {
      command->add_flag("--requeue", *requeue,
                        "Requeue what cannot move live instead of letting it finish there (checkpointable jobs resume "
                        "elsewhere from the checkpoint taken as they stop; the rest start again)");
      command->add_flag("--wait", *wait, "Wait until no job is left on the node (exit 1 at --timeout, listing them)");
      command->add_option("--timeout", *timeout, "Seconds --wait waits")->capture_default_str()->check(positive_seconds());
    }
    command->footer("Example:\n  cnlab admin node " + verb + " gpu-7" + (verb == "drain" ? " --wait" : ""));
    command->callback([flags, verb, done, name, wait, requeue, timeout] {
      const Json body = *requeue ? Json{{"requeue", true}} : Json::object();
      auto answered = call_json(*flags, "POST", "/v1/nodes/" + url_encode(*name) + "/" + verb, body);
      if (!answered) std::exit(report(answered.error()));
      std::printf("node %s %s\n", name->c_str(),
                  *requeue ? "draining: no new work; its checkpointable jobs move live to other nodes, the rest are "
                             "requeued (cnlab ps --all shows them)"
                           : done.c_str());
      std::fflush(stdout);
      std::exit(*wait ? wait_until_drained(*flags, *name, std::chrono::seconds(*timeout)) : kExitOk);
    });
  }
}

}  // namespace cnlab::cli
