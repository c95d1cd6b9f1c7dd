// `cnlab ps`: the caller's jobs (or everyone's with --all), one line each, oldest first.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>

#include "cli/commands.h"
#include "cli/job_listing.h"
#include "cli/output.h"

namespace cnlab::cli {
namespace {

struct PsArgs {
  bool all = false;
  std::string project;
  std::string phase;
  std::string output;
};

constexpr const char* kPhases[] = {"Pending", "Scheduled", "Running", "Succeeded", "Failed", "Cancelled"};

// "running" -> "Running"; an unknown phase is a usage error naming --phase.
Result<std::string> canonical_phase(const std::string& text) {
  for (const char* phase : kPhases) {
    if (strcasecmp(text.c_str(), phase) == 0) return std::string(phase);
  }
  return Error::invalid_argument("--phase", text,
                                 "unknown phase; expected Pending, Scheduled, Running, Succeeded, Failed or Cancelled");
}

const char* phase_colour(std::string_view phase) {
  if (phase == "Running") return kGreen;
  if (phase == "Pending") return kYellow;
  if (phase == "Scheduled") return kCyan;
  if (phase == "Failed") return kRed;
  if (phase == "Cancelled") return kDim;
  return nullptr;
}

// "gpu-1", "gpu-1,gpu-2", "gpu-1+3" (a gang over four nodes); "-" before placement.
std::string nodes_of(const Json& job) {
  auto status = job.find("status");
  if (status == job.end()) return "-";
  auto placement = status->find("placement");
  if (placement == status->end() || !placement->is_array() || placement->empty()) return "-";
  std::string first = (*placement)[0].value("node", "");
  if (placement->size() == 1) return first;
  if (placement->size() == 2) return first + "," + (*placement)[1].value("node", "");
  return first + "+" + std::to_string(placement->size() - 1);
}

// "0", "1", "SIGKILL"; "-" while it has not ended.
std::string exit_of(const Json& job) {
  auto status = job.find("status");
  if (status == job.end()) return "-";
  if (auto sig = status->find("signal"); sig != status->end() && sig->is_number_integer()) {
    const char* name = sigabbrev_np(sig->get<int>());
    return name ? std::string("SIG") + name : "signal " + std::to_string(sig->get<int>());
  }
  if (auto code = status->find("exit_code"); code != status->end() && code->is_number_integer()) {
    return std::to_string(code->get<int>());
  }
  return "-";
}

void run_ps(const ClientFlags& flags, const PsArgs& args) {
  auto format = parse_output_format(args.output);
  if (!format) fail(format.error());
  JobQuery query;
  query.project = args.project;
  if (!args.phase.empty()) {
    auto phase = canonical_phase(args.phase);
    if (!phase) fail(phase.error());
    query.phase = *phase;
  }
  auto client = connect(flags);
  if (!client) fail(client.error());
  auto me = whoami(**client);
  if (!me) fail(me.error());
  if (!args.all) query.user = me->user;
  auto jobs = list_jobs(**client, *me, query);
  if (!jobs) fail(jobs.error());

  // Oldest first, so the newest job is the line nearest the prompt.
  std::vector<std::pair<std::string_view, Json*>> order;
  order.reserve(jobs->size());
  for (Json& job : *jobs) order.push_back({field(job, "status", "submitted_at"), &job});
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });

  if (*format == OutputFormat::kJson) {
    Json items = Json::array();
    for (const auto& [when, job] : order) items.push_back(std::move(*job));
    print_json_and_exit(Json{{"items", std::move(items)}});
  }
  if (*format == OutputFormat::kName) {
    std::string out;
    out.reserve(order.size() * 24);
    for (const auto& [when, job] : order) {
      out += field(*job, "metadata", "name");
      out += '\n';
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::exit(0);
  }
  if (order.empty()) {
    std::fprintf(stderr, "no jobs%s\n",
                 args.all ? "" : " of yours (cnlab ps --all lists everyone's in the projects you can see)");
    std::exit(0);
  }

  const bool show_user = args.all;
  std::vector<Table::Column> columns = {{"JOB"}, {"PROJECT"}};
  if (show_user) columns.push_back({"USER"});
  for (const char* c : {"GPU", "PHASE", "NODE"}) columns.push_back({c, Table::Align::kLeft, std::strcmp(c, "NODE") == 0});
  columns.push_back({"AGE", Table::Align::kRight});
  columns.push_back({"RUNTIME", Table::Align::kRight});
  columns.push_back({"EXIT", Table::Align::kRight});
  Table table(std::move(columns));
  const Time now = now_seconds();
  for (const auto& [when, job_ptr] : order) {
    const Json& job = *job_ptr;
    table.row();
    table.cell(std::string(field(job, "metadata", "name")));
    table.cell(std::string(field(job, "spec", "project")));
    if (show_user) table.cell(std::string(field(job, "spec", "user")));
    table.cell(std::string(field(job, "spec", "gpu")));
    std::string_view phase = field(job, "status", "phase");
    table.cell(std::string(phase), phase_colour(phase));
    table.cell(nodes_of(job));
    Time submitted = time_field(job, "status", "submitted_at");
    table.cell(submitted == Time{} ? "-" : format_age(now - submitted));
    Time started = time_field(job, "status", "started_at");
    Time finished = time_field(job, "status", "finished_at");
    table.cell(started == Time{} ? "-" : format_age((finished == Time{} ? now : finished) - started));
    table.cell(exit_of(job));
  }
  table.print(stdout);
  std::exit(0);
}

}  // namespace

void add_ps_command(CLI::App& app, std::shared_ptr<ClientFlags> flags) {
  auto args = std::make_shared<PsArgs>();
  auto* ps = app.add_subcommand("ps", "List your jobs (--all: everyone's in the projects you can see)");
  ps->add_flag("-a,--all", args->all, "Every user's jobs (a cluster admin: in every project)");
  ps->add_option("-p,--project", args->project, "Only this project");
  ps->add_option("--phase", args->phase, "Only jobs in this phase: Pending, Scheduled, Running, Succeeded, Failed, Cancelled");
  add_output_option(*ps, args->output);
  ps->footer(
      "Example:\n"
      "  cnlab ps                      # your jobs, oldest first\n"
      "  cnlab ps --all --phase Running\n"
      "  cnlab ps -o name | xargs -n1 cnlab describe");
  ps->callback([flags, args] { run_ps(*flags, *args); });
}

}  // namespace cnlab::cli
