// `cnlab quota`: the quotas that apply to the caller (their projects' quotas, and their own in
// them), each limit beside what is used now. The server keeps no usage on the quota, so it is
// counted here from the project's jobs the way admission counts it (docs/api.md §14.2).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>

#include "cli/commands.h"
#include "cli/job_listing.h"
#include "cli/output.h"
#include "model/slice_request.h"

namespace cnlab::cli {
namespace {

struct QuotaArgs {
  bool all = false;
  std::string project;
  std::string output;
};

struct Usage {
  int64_t jobs = 0;
  int64_t blocks = 0;
  std::map<std::string, int64_t> blocks_by_model;
  double gpu_hours = 0;
};

bool active(std::string_view phase) { return phase == "Pending" || phase == "Scheduled" || phase == "Running"; }

// What `quota` counts of `jobs` (all of its project's), as admission does.
Usage usage_of(const Json& quota, const std::vector<Json>& jobs, Time now) {
  const Json& spec = quota["spec"];
  std::string user = spec.value("user", "");
  Duration window = 7 * kDay;
  if (auto w = parse_duration(spec.value("gpu_hours_window", "7d"), "gpu_hours_window")) window = *w;
  Usage u;
  for (const Json& job : jobs) {
    if (!user.empty() && field(job, "spec", "user") != user) continue;
    auto request = model::parse_slice(field(job, "spec", "gpu"));
    int64_t blocks = request ? request->total_blocks() : 0;
    if (active(field(job, "status", "phase"))) {
      u.jobs += 1;
      u.blocks += blocks;
      if (request && request->kind != model::SliceKind::kNone && std::popcount(request->models) == 1) {
        std::string name(model::gpu_model(static_cast<model::ModelId>(std::countr_zero(request->models))).name);
        u.blocks_by_model[name] += blocks;
      }
    }
    Time started = time_field(job, "status", "started_at");
    if (started == Time{}) continue;
    Time finished = time_field(job, "status", "finished_at");
    Time from = std::max(started, now - window);
    Time to = std::min(finished == Time{} ? now : finished, now);
    if (to > from) u.gpu_hours += static_cast<double>((to - from).count()) / 3600.0 * static_cast<double>(blocks) / 100.0;
  }
  return u;
}

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", std::round(value * 100) / 100);
  return text;
}

void run_quota(const ClientFlags& flags, const QuotaArgs& args) {
  auto format = parse_output_format(args.output, /*allow_name=*/false);
  if (!format) fail(format.error());
  auto client = connect(flags);
  if (!client) fail(client.error());
  auto me = whoami(**client);
  if (!me) fail(me.error());
  auto quotas = get_json(**client, "/v1/quotas");
  if (!quotas) fail(quotas.error());
  // Quotas of the projects the caller has a role in (a cluster admin: every project); those of
  // other users are left out unless --all.
  std::vector<const Json*> apply;
  for (const Json& q : (*quotas)["items"]) {
    std::string_view project = field(q, "spec", "project");
    std::string_view user = field(q, "spec", "user");
    if (!args.project.empty() && project != args.project) continue;
    if (!args.all && !user.empty() && user != me->user) continue;
    if (!args.all && !me->roles.count(std::string(project)) && !me->admin()) continue;
    apply.push_back(&q);
  }
  std::sort(apply.begin(), apply.end(), [](const Json* a, const Json* b) {
    return std::pair{field(*a, "spec", "project"), field(*a, "metadata", "name")} <
           std::pair{field(*b, "spec", "project"), field(*b, "metadata", "name")};
  });

  // Each project's jobs, read once.
  std::map<std::string, std::vector<Json>> jobs_of;
  for (const Json* q : apply) {
    std::string project(field(*q, "spec", "project"));
    if (jobs_of.count(project)) continue;
    JobQuery query;
    query.project = project;
    auto jobs = list_jobs(**client, *me, query);
    // A quota of a project that does not exist (the server allows it) counts nothing.
    if (!jobs && jobs.error().code != ErrorCode::kNotFound) fail(jobs.error());
    jobs_of[project] = jobs ? std::move(*jobs) : std::vector<Json>{};
  }
  const Time now = now_seconds();

  if (*format == OutputFormat::kJson) {
    Json items = Json::array();
    for (const Json* q : apply) {
      Usage u = usage_of(*q, jobs_of[std::string(field(*q, "spec", "project"))], now);
      Json item = *q;
      item["usage"] = {{"concurrent_jobs", u.jobs},
                       {"gpus", static_cast<double>(u.blocks) / 100.0},
                       {"blocks_per_model", u.blocks_by_model},
                       {"gpu_hours", std::round(u.gpu_hours * 100) / 100}};
      items.push_back(std::move(item));
    }
    print_json_and_exit(Json{{"items", std::move(items)}});
  }
  if (apply.empty()) {
    std::fprintf(stderr, "no quotas apply to you%s\n", args.project.empty() ? "" : (" in project " + args.project).c_str());
    std::exit(0);
  }

  Table table({{"QUOTA"}, {"PROJECT"}, {"USER"}, {"RESOURCE"}, {"USED", Table::Align::kRight},
               {"LIMIT"}, {"NOTES"}});
  for (const Json* q : apply) {
    const Json& spec = (*q)["spec"];
    Usage u = usage_of(*q, jobs_of[spec.value("project", "")], now);
    bool first = true;
    auto add = [&](const std::string& resource, double used, double limit, const std::string& limit_text) {
      table.row();
      table.cell(first ? std::string(field(*q, "metadata", "name")) : "");
      table.cell(first ? spec.value("project", "") : "");
      table.cell(first ? (spec.value("user", "").empty() ? "-" : spec.value("user", "")) : "");
      table.cell(resource);
      const char* sgr = used >= limit ? kRed : used >= 0.8 * limit ? kYellow : kGreen;
      table.cell(number(used), limit >= 0 ? sgr : nullptr);
      table.cell(limit_text);
      table.cell(first && spec.value("borrowing", false) ? "borrowing: jobs over it run pre-emptible" : "");
      first = false;
    };
    if (spec.contains("concurrent_jobs") && spec["concurrent_jobs"].is_number()) {
      double limit = spec["concurrent_jobs"].get<double>();
      add("concurrent_jobs", static_cast<double>(u.jobs), limit, number(limit));
    }
    if (spec.contains("gpus") && spec["gpus"].is_number()) {
      double limit = spec["gpus"].get<double>();
      add("gpus", static_cast<double>(u.blocks) / 100.0, limit, number(limit));
    }
    if (spec.contains("blocks_per_model") && spec["blocks_per_model"].is_object()) {
      for (const auto& [model, limit] : spec["blocks_per_model"].items()) {
        if (!limit.is_number()) continue;
        auto used = u.blocks_by_model.find(model);
        add("blocks " + model, used == u.blocks_by_model.end() ? 0 : static_cast<double>(used->second),
            limit.get<double>(), number(limit.get<double>()));
      }
    }
    if (spec.contains("gpu_hours") && spec["gpu_hours"].is_number()) {
      double limit = spec["gpu_hours"].get<double>();
      add("gpu_hours", u.gpu_hours, limit, number(limit) + " per " + spec.value("gpu_hours_window", "7d"));
    }
    if (first) add("(no limits)", 0, -1, "-");
  }
  table.print(stdout);
  std::exit(0);
}

}  // namespace

void add_quota_command(CLI::App& app, std::shared_ptr<ClientFlags> flags) {
  auto args = std::make_shared<QuotaArgs>();
  auto* quota = app.add_subcommand("quota", "Show the quotas that apply to you, used against their limits");
  quota->add_flag("-a,--all", args->all, "Also other users' quotas in your projects");
  quota->add_option("-p,--project", args->project, "Only this project's quotas");
  add_output_option(*quota, args->output, /*allow_name=*/false);
  quota->footer(
      "Example:\n"
      "  cnlab quota\n"
      "  QUOTA         PROJECT  USER   RESOURCE         USED  LIMIT  NOTES\n"
      "  vision-gpus   vision   -      concurrent_jobs     3  10\n"
      "                                gpus              2.5  4\n"
      "  vision-alice  vision   alice  concurrent_jobs     2  2      borrowing: jobs over it run pre-emptible");
  quota->callback([flags, args] { run_quota(*flags, *args); });
}

}  // namespace cnlab::cli
