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

// A summary item's `key` as a string without a copy; "" when absent or not a string.
std::string_view text_of(const Json& job, const char* key) {
  auto it = job.find(key);
  return it == job.end() || !it->is_string() ? std::string_view() : std::string_view(it->get_ref<const std::string&>());
}

Time time_of(const Json& job, const char* key) {
  std::string_view text = text_of(job, key);
  if (text.empty()) return Time{};
  auto time = parse_rfc3339(text, key);
  return time ? *time : Time{};
}

// "gpu-1", "gpu-1,gpu-2", "gpu-1+3" (a gang over four nodes); "-" before placement.
std::string nodes_of(const Json& job) {
  auto nodes = job.find("nodes");
  if (nodes == job.end() || !nodes->is_array() || nodes->empty() || !(*nodes)[0].is_string()) return "-";
  std::string first = (*nodes)[0].get<std::string>();
  if (nodes->size() == 1) {
    // A move not yet handed over: still on its source, on its way to the target ("" for any).
    const std::string to = job.value("moving_to", first);
    return to == first ? first : first + " -> " + (to.empty() ? "?" : to);
  }
  if (nodes->size() == 2 && (*nodes)[1].is_string()) return first + "," + (*nodes)[1].get<std::string>();
  return first + "+" + std::to_string(nodes->size() - 1);
}

// "0", "1", "SIGKILL"; "-" while it has not ended.
std::string exit_of(const Json& job) {
  if (auto sig = job.find("signal"); sig != job.end() && sig->is_number_integer()) {
    const char* name = sigabbrev_np(sig->get<int>());
    return name ? std::string("SIG") + name : "signal " + std::to_string(sig->get<int>());
  }
  if (auto code = job.find("exit_code"); code != job.end() && code->is_number_integer()) {
    return std::to_string(code->get<int>());
  }
  return "-";
}

// Oldest first (by `submitted`), so the newest job is the line nearest the prompt.
template <typename When>
std::vector<Json*> oldest_first(std::vector<Json>& jobs, When submitted) {
  std::vector<std::pair<std::string_view, Json*>> order;
  order.reserve(jobs.size());
  for (Json& job : jobs) order.push_back({submitted(job), &job});
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Json*> out;
  out.reserve(order.size());
  for (const auto& [when, job] : order) out.push_back(job);
  return out;
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

  // -o json: the full objects, which scripts read.
  if (*format == OutputFormat::kJson) {
    auto jobs = list_jobs(**client, *me, query);
    if (!jobs) fail(jobs.error());
    Json items = Json::array();
    for (Json* job : oldest_first(*jobs, [](const Json& j) { return field(j, "status", "submitted_at"); })) {
      items.push_back(std::move(*job));
    }
    print_json_and_exit(Json{{"items", std::move(items)}});
  }

  // The table and -o name need only the summary view: a fifth of the bytes and no paging.
  auto jobs = list_job_summaries(**client, query);
  if (!jobs) fail(jobs.error());
  std::vector<Json*> order = oldest_first(*jobs, [](const Json& j) { return text_of(j, "submitted_at"); });
  if (*format == OutputFormat::kName) {
    std::string out;
    out.reserve(order.size() * 24);
    for (const Json* job : order) {
      out += text_of(*job, "name");
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
  for (const Json* job_ptr : order) {
    const Json& job = *job_ptr;
    table.row();
    table.cell(std::string(text_of(job, "name")));
    table.cell(std::string(text_of(job, "project")));
    if (show_user) table.cell(std::string(text_of(job, "user")));
    table.cell(std::string(text_of(job, "gpu")));
    std::string_view phase = text_of(job, "phase");
    std::string phase_text(phase);
    if (job.value("cancelling", false)) {
      phase_text += " (cancelling)";
    } else if (job.contains("moving_to")) {
      phase_text += " (moving)";
    }
    table.cell(phase_text, phase_colour(phase));
    table.cell(nodes_of(job));
    Time submitted = time_of(job, "submitted_at");
    table.cell(submitted == Time{} ? "-" : format_age(now - submitted));
    Time started = time_of(job, "started_at");
    Time finished = time_of(job, "finished_at");
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
