#include "sim/replay_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "sched/policy_config.h"
#include "sim/svg_chart.h"

namespace cnlab::sim {
namespace {

// Chart points per line: enough for a 900-pixel-wide panel, small enough for a light file.
constexpr size_t kChartBuckets = 600;

double seconds_between(Time a, Time b) { return static_cast<double>((b - a).count()); }

std::string percent(double fraction) { return fmt::format("{:.2f}%", 100.0 * fraction); }

Stats stats_of(const std::vector<double>& values) { return summarize(values); }

struct Collect {
  std::vector<double> delay, completion;
  size_t jobs = 0;
};

std::string stats_cells(const Stats& s) {
  return fmt::format("{} | {} | {}", format_seconds(s.p50), format_seconds(s.p99), format_seconds(s.mean));
}

// A table with one row per group (class or project), three columns per policy.
void group_table(std::string& md, const std::string& title, const std::string& group_name,
                 const std::vector<RunSummary>& summaries, const std::vector<ReplayRun>& runs, bool by_class,
                 bool delay) {
  md += fmt::format("\n### {}\n\n| {} | jobs |", title, group_name);
  std::string rule = "|---|---:|";
  for (const ReplayRun& run : runs) {
    md += fmt::format(" {0} p50 | {0} p99 | {0} mean |", run.policy);
    rule += "---:|---:|---:|";
  }
  md += "\n" + rule + "\n";
  const std::vector<GroupStats>& rows = by_class ? summaries[0].by_class : summaries[0].by_project;
  for (size_t g = 0; g < rows.size(); ++g) {
    md += fmt::format("| {} | {} |", rows[g].group, rows[g].jobs);
    for (const RunSummary& s : summaries) {
      const GroupStats& gs = (by_class ? s.by_class : s.by_project)[g];
      md += " " + stats_cells(delay ? gs.delay : gs.completion) + " |";
    }
    md += "\n";
  }
}

// A Markdown table header: `first` then one right-aligned column per policy.
std::string policy_columns(std::string_view first, const std::vector<ReplayRun>& runs) {
  std::string header = first.empty() ? "| |" : "| " + std::string(first) + " |", rule = "|---|";
  for (const ReplayRun& run : runs) {
    header += " " + run.policy + " |";
    rule += "---:|";
  }
  return header + "\n" + rule + "\n";
}

}  // namespace

std::string format_seconds(double seconds) {
  if (std::isnan(seconds)) return "-";
  double a = std::fabs(seconds);
  if (a < 120) return a == std::floor(a) ? fmt::format("{:.0f}s", seconds) : fmt::format("{:.1f}s", seconds);
  if (a < 2 * 3600) return fmt::format("{:.1f}m", seconds / 60);
  if (a < 2 * 86400) return fmt::format("{:.1f}h", seconds / 3600);
  return fmt::format("{:.1f}d", seconds / 86400);
}

RunSummary summarize_run(const ReplayTrace& trace, const ReplayRun& run) {
  RunSummary s;
  s.jobs = trace.jobs.size();
  Collect all;
  std::map<std::string, Collect> classes, projects;
  std::map<std::string, std::pair<double, double>> service;  // project -> (held, asked)
  for (size_t j = 0; j < trace.jobs.size(); ++j) {
    const ReplayJob& job = trace.jobs[j];
    const JobOutcome& o = run.jobs[j];
    Collect& c = classes[job.spec.priority_class];
    Collect& p = projects[job.spec.project];
    ++c.jobs;
    ++p.jobs;
    if (o.first_start) {
      double d = seconds_between(job.submit, *o.first_start);
      for (Collect* x : {&all, &c, &p}) x->delay.push_back(d);
    } else {
      ++s.never_started;
    }
    if (o.end) {
      ++s.finished;
      double t = seconds_between(job.submit, *o.end);
      for (Collect* x : {&all, &c, &p}) x->completion.push_back(t);
    }
    if (job.spec.deadline) {
      ++s.deadline_jobs;
      if (o.end && *o.end <= *job.spec.deadline) ++s.deadline_met;
    }
    const double blocks = job.spec.gpu.total_blocks();
    if (blocks > 0) {
      auto& [held, asked] = service[job.spec.project];
      held += blocks * static_cast<double>(o.ran.count());
      asked += blocks * std::max(0.0, seconds_between(job.submit, o.end.value_or(run.end)));
    }
    s.lost_gpu_hours += blocks / model::kBlocksPerGpu * static_cast<double>(o.lost.count()) / 3600.0;
  }
  s.delay = stats_of(all.delay);
  s.completion = stats_of(all.completion);
  std::vector<double> ratios;
  for (const auto& [project, v] : service) {
    if (v.second <= 0) continue;
    s.service_ratio.emplace_back(project, v.first / v.second);
    ratios.push_back(v.first / v.second);
  }
  s.jain = jain_index(ratios);
  for (const auto& tier : sched::PolicyConfig{}.tiers) {
    auto it = classes.find(tier.name);
    if (it == classes.end()) continue;
    s.by_class.push_back({tier.name, it->second.jobs, stats_of(it->second.delay), stats_of(it->second.completion)});
  }
  for (const auto& [name, c] : projects) s.by_project.push_back({name, c.jobs, stats_of(c.delay), stats_of(c.completion)});
  return s;
}

std::string replay_summary_markdown(const ReplayReport& r) {
  std::vector<RunSummary> summaries;
  for (const ReplayRun& run : r.runs) summaries.push_back(summarize_run(r.trace, run));
  const bool openb = r.trace.format == TraceFormat::kOpenb;
  std::string md = "# Replay experiment\n\n";
  md += fmt::format("- Trace: `{}` ({}), {} jobs", r.trace.label, openb ? "openb pod list" : "generic CSV",
                    r.trace.jobs.size());
  if (!r.runs.empty()) {
    // The replay ends with the last completion, which differs between policies.
    std::vector<std::string> ends;
    for (const ReplayRun& run : r.runs) {
      ends.push_back(fmt::format("t={}s under {} ({} after the first arrival)", trace_seconds(run.end), run.policy,
                                 format_seconds(seconds_between(run.start, run.end))));
    }
    md += fmt::format("; first arrival at t={}s; the replay ends at {}", trace_seconds(r.runs[0].start), join(ends, ", "));
  }
  md += fmt::format("\n- Cluster: {} ({})\n", r.cluster, r.cluster_source);
  md += fmt::format(
      "- Settings: a cycle at most every {}, samples at least every {}, checkpoints every {} of run time "
      "(checkpointable: {}), power-down after {} idle\n",
      format_duration(r.options.cycle_interval), format_duration(r.options.sample_every),
      format_duration(r.options.checkpoint_every), r.options.checkpointable.to_string(),
      format_duration(r.options.power_down_after));
  if (!r.options.scheduler_settings.empty()) md += "- Scheduler: " + r.options.scheduler_settings + "\n";
  if (!r.options.migration_settings.empty()) md += "- Migrations: " + r.options.migration_settings + "\n";
  if (openb) {
    md += fmt::format(
        "- openb: QoS Guaranteed -> inference, LS -> production, Burstable -> dev, BE -> opportunistic; run time "
        "= deletion_time - scheduled_time ({} pods never scheduled in the real cluster run for deletion_time - "
        "creation_time). The trace names no projects: every pod is in project \"openb\", so Jain's index is 1 by "
        "construction.\n",
        r.trace.unscheduled);
  }
  if (r.trace.zero_run_time > 0) md += fmt::format("- {} jobs had a run time of 0 and run for 1 s.\n", r.trace.zero_run_time);

  md += "\n## Side by side\n\n" + policy_columns("", r.runs);
  auto row = [&](const std::string& name, auto cell) {
    md += "| " + name + " |";
    for (size_t i = 0; i < r.runs.size(); ++i) md += " " + cell(r.runs[i], summaries[i]) + " |";
    md += "\n";
  };
  row("jobs finished", [](const ReplayRun&, const RunSummary& s) { return fmt::format("{} of {}", s.finished, s.jobs); });
  row("jobs never started", [](const ReplayRun&, const RunSummary& s) { return std::to_string(s.never_started); });
  row("queueing delay p50", [](const ReplayRun&, const RunSummary& s) { return format_seconds(s.delay.p50); });
  row("queueing delay p99", [](const ReplayRun&, const RunSummary& s) { return format_seconds(s.delay.p99); });
  row("queueing delay mean", [](const ReplayRun&, const RunSummary& s) { return format_seconds(s.delay.mean); });
  row("completion time p50", [](const ReplayRun&, const RunSummary& s) { return format_seconds(s.completion.p50); });
  row("completion time p99", [](const ReplayRun&, const RunSummary& s) { return format_seconds(s.completion.p99); });
  row("completion time mean", [](const ReplayRun&, const RunSummary& s) { return format_seconds(s.completion.mean); });
  row("deadline hit rate", [](const ReplayRun&, const RunSummary& s) {
    if (s.deadline_jobs == 0) return std::string("no deadlines");
    return fmt::format("{:.1f}% ({} of {})", 100.0 * static_cast<double>(s.deadline_met) / static_cast<double>(s.deadline_jobs),
                       s.deadline_met, s.deadline_jobs);
  });
  row("Jain's index across projects", [](const ReplayRun&, const RunSummary& s) {
    return std::isnan(s.jain) ? std::string("-") : fmt::format("{:.4f} ({} projects)", s.jain, s.service_ratio.size());
  });
  row("mean GPU allocation", [](const ReplayRun& run, const RunSummary&) { return percent(run.mean_allocation()); });
  row("mean GPU utilization", [](const ReplayRun& run, const RunSummary&) { return percent(run.mean_utilization()); });
  row("could have been powered down", [](const ReplayRun& run, const RunSummary&) {
    double hours = run.power_down_node_seconds / 3600.0;
    double span = seconds_between(run.start, run.end) / 3600.0;
    return fmt::format("{:.0f} node-hours ({} nodes; {:.1f} nodes on average)", hours, run.nodes_ever_off,
                       span > 0 ? hours / span : 0.0);
  });
  row("pre-emptions", [](const ReplayRun& run, const RunSummary&) { return std::to_string(run.preemptions); });
  row("GPU-hours lost to pre-emption", [](const ReplayRun&, const RunSummary& s) { return fmt::format("{:.1f}", s.lost_gpu_hours); });
  row("live migrations (pause in all)", [](const ReplayRun& run, const RunSummary&) {
    std::string text =
        fmt::format("{} ({})", run.migrations, format_seconds(static_cast<double>(run.migration_pause.count()) / 1000.0));
    if (run.drain_moves > 0) text += fmt::format("; {} of them to drain nodes", run.drain_moves);
    return text;
  });
  row("scheduling cycles", [](const ReplayRun& run, const RunSummary&) {
    return fmt::format("{} ({} woken by time)", run.cycles, run.wake_ups);
  });

  if (!r.runs.empty()) {
    md += "\n## By priority class\n";
    group_table(md, "Queueing delay", "class", summaries, r.runs, true, true);
    group_table(md, "Completion time", "class", summaries, r.runs, true, false);
    md += "\n## By project\n";
    group_table(md, "Queueing delay", "project", summaries, r.runs, false, true);
    group_table(md, "Completion time", "project", summaries, r.runs, false, false);
    md += "\n### Service ratio (fair share)\n\n" + policy_columns("project", r.runs);
    for (size_t p = 0; p < summaries[0].service_ratio.size(); ++p) {
      md += "| " + summaries[0].service_ratio[p].first + " |";
      for (const RunSummary& s : summaries) {
        auto it = std::find_if(s.service_ratio.begin(), s.service_ratio.end(),
                               [&](const auto& e) { return e.first == summaries[0].service_ratio[p].first; });
        md += it == s.service_ratio.end() ? std::string(" - |") : fmt::format(" {:.4f} |", it->second);
      }
      md += "\n";
    }
  }
  for (const ReplayRun& run : r.runs) {
    if (run.warnings.empty()) continue;
    md += fmt::format("\n{} reported warnings about the snapshot (first {}):\n", run.policy, run.warnings.size());
    for (const std::string& w : run.warnings) md += "- " + w + "\n";
  }
  md += R"(
## Definitions

- Queueing delay: first start - submit, over jobs that started. Completion time: end - submit, over
  jobs that finished. Percentiles are nearest-rank (always one of the observed values).
- Deadline hit rate: jobs with a deadline that finished by it, over all jobs with a deadline.
- Service ratio of a project: block-seconds its jobs held GPUs (requested blocks x seconds running,
  work later lost included) / block-seconds they asked for while in the system (requested blocks x
  (end or the replay's end - submit)). Jain's index is (sum x)^2 / (n sum x^2) over the projects'
  ratios: 1 when every project was served alike.
- GPU allocation: blocks granted / blocks of the cluster (fifo grants a whole GPU to a fractional
  request). GPU utilization: blocks the running jobs asked for / blocks of the cluster. Both are
  time-weighted means over the replay.
- Could have been powered down: every stretch a node ran nothing counts its length minus the
  power-down delay (booting taken as instant).
)";
  return md;
}

std::string replay_timeseries_csv(const std::vector<ReplayRun>& runs) {
  std::string csv = "time,policy,allocation_pct,utilization_pct,pending,running,nodes_on\n";
  for (const ReplayRun& run : runs) {
    for (const ReplaySample& s : run.samples) {
      csv += fmt::format("{},{},{:.3f},{:.3f},{},{},{}\n", trace_seconds(s.at), run.policy, 100 * s.allocation,
                         100 * s.utilization, s.pending, s.running, s.nodes_on);
    }
  }
  return csv;
}

std::string replay_jobs_csv(const ReplayTrace& trace, const std::vector<ReplayRun>& runs) {
  std::string csv =
      "policy,job,class,project,gpu,submit,first_start,end,queueing_delay,completion_time,run_time,preemptions,"
      "lost_work,deadline,met_deadline\n";
  auto opt = [](const std::optional<Time>& t) { return t ? std::to_string(trace_seconds(*t)) : std::string(); };
  for (const ReplayRun& run : runs) {
    for (size_t j = 0; j < trace.jobs.size(); ++j) {
      const ReplayJob& job = trace.jobs[j];
      const JobOutcome& o = run.jobs[j];
      std::string delay = o.first_start ? std::to_string((*o.first_start - job.submit).count()) : "";
      std::string completion = o.end ? std::to_string((*o.end - job.submit).count()) : "";
      std::string met;
      if (job.spec.deadline) met = o.end && *o.end <= *job.spec.deadline ? "yes" : "no";
      csv += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", run.policy, job.name, job.spec.priority_class,
                         job.spec.project, model::to_string(job.spec.gpu), trace_seconds(job.submit), opt(o.first_start),
                         opt(o.end), delay, completion, job.run_time.count(), o.preemptions, o.lost.count(),
                         opt(job.spec.deadline), met);
    }
  }
  return csv;
}

std::string replay_svg(const std::vector<ReplayRun>& runs) {
  Time start = runs.empty() ? Time{} : runs[0].start, end = start;
  for (const ReplayRun& run : runs) end = std::max(end, run.end);
  const double span = std::max(1.0, seconds_between(start, end));
  const bool days = span > 2 * 86400.0;
  const double unit = days ? 86400.0 : 3600.0;
  std::vector<ChartPanel> panels = {{"GPU allocation (blocks granted)", "% of the cluster's GPUs", {}, 0},
                                    {"GPU utilization (blocks asked by running jobs)", "% of the cluster's GPUs", {}, 0},
                                    {"Jobs waiting", "jobs", {}, 0}};
  for (const ReplayRun& run : runs) {
    // Each point is the mean of the samples in its bucket of time.
    std::vector<double> sums[3];
    std::vector<size_t> counts(kChartBuckets, 0);
    for (auto& s : sums) s.assign(kChartBuckets, 0.0);
    for (const ReplaySample& s : run.samples) {
      auto b = std::min(kChartBuckets - 1, static_cast<size_t>(seconds_between(start, s.at) / span * kChartBuckets));
      sums[0][b] += 100 * s.allocation;
      sums[1][b] += 100 * s.utilization;
      sums[2][b] += s.pending;
      ++counts[b];
    }
    for (size_t k = 0; k < 3; ++k) {
      ChartSeries series{run.policy, {}};
      for (size_t b = 0; b < kChartBuckets; ++b) {
        if (counts[b] == 0) continue;
        double x = (static_cast<double>(b) + 0.5) / kChartBuckets * span / unit;
        series.points.emplace_back(x, sums[k][b] / static_cast<double>(counts[b]));
      }
      panels[k].series.push_back(std::move(series));
    }
  }
  return time_series_svg(panels, days ? "days since the first arrival" : "hours since the first arrival");
}

}  // namespace cnlab::sim
