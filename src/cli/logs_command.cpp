// `cnlab logs [-f] JOB`: a job's log; with -f, followed until the job has ended and its log is
// printed to the end. The job's stdout lines go to stdout, its stderr lines to stderr; -o json
// prints the server's ndjson lines as they are.
#include <cstdio>
#include <memory>

#include "cli/arguments.h"
#include "cli/cli.h"
#include "cli/client_config.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/job_attach.h"

namespace cnlab::cli {
namespace {

struct LogsOptions {
  std::string job;
  bool follow = false;
  int64_t from_seq = 0;
  std::string output = "text";
};

int logs(const ClientFlags& flags, const LogsOptions& options) {
  auto client_options = resolve_client(flags);
  if (!client_options) return report(client_options.error());
  auto connected = net::Client::connect(*client_options);
  if (!connected) return report(connected.error());
  net::Client& api = **connected;
  bool json = options.output == "json";

  auto got = api.request("GET", "/v1/jobs/" + options.job);
  if (!got) return report(got.error());
  if (got->status != 200) return report(net::error_from_response(got->status, got->body, ""));
  Json job = Json::parse(got->body, nullptr, false);
  bool prefix_node = job.is_object() && job["status"].value("placement", Json::array()).size() > 1;

  Console console;
  if (!options.follow || (job.is_object() && job_finished(job))) {
    auto read = read_log(api, options.job, options.from_seq, [&](const Json& line, std::string_view raw) {
      console.log_line(line, raw, json, prefix_node);
    });
    if (!read) return report(read.error());
    return kExitOk;
  }
  AttachOptions attach;
  attach.json_lines = json;
  attach.show_state = false;
  attach.from_seq = options.from_seq;
  auto ended = attach_job(api, *client_options, options.job, console, attach);
  if (!ended) return report(ended.error());
  return kExitOk;
}

}  // namespace

void add_logs_command(CLI::App& app, std::shared_ptr<ClientFlags> flags) {
  auto options = std::make_shared<LogsOptions>();
  auto* logs_app = app.add_subcommand("logs", "Print a job's log; -f follows it until the job ends");
  logs_app->add_option("JOB", options->job, "Job id (train-6f3ae726)")->required()->check(job_id());
  logs_app->add_flag("-f,--follow", options->follow, "Keep printing new lines until the job has ended");
  logs_app->add_option("--from-seq", options->from_seq, "Start at this line number (the server's seq)")
      ->check(CLI::NonNegativeNumber);
  logs_app->add_option("-o,--output", options->output, "text, or json for the server's ndjson lines")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  logs_app->footer("Example: cnlab logs -f train-6f3ae726");
  logs_app->callback([flags, options] { std::exit(logs(*flags, *options)); });
}

}  // namespace cnlab::cli
