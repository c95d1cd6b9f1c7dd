// The replay experiment's files: summary.md (every policy side by side), timeseries.csv,
// jobs.csv and replay.svg, plus the per-run figures the summary is made of.
//
// Definitions (also written into summary.md):
//  * queueing delay  = first start - submit, over jobs that started;
//  * completion time = end - submit, over jobs that finished;
//    mean, p50 and p99 are over jobs; percentiles are nearest-rank (replay_metrics.h);
//  * deadline hit rate = jobs with a deadline that finished by it / jobs with a deadline (a job
//    still waiting or running at the end missed it);
//  * service ratio of a project = the block-seconds its jobs held GPUs (requested blocks x seconds
//    running, lost work included) / the block-seconds they asked for while in the system
//    (requested blocks x (end, or the replay's end, - submit)); 1 means no job ever waited.
//    Jain's index is taken over the projects' service ratios (jobs without GPUs left out);
//  * allocation and utilization means are time-weighted over [first arrival, last event].
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "sim/replay_engine.h"
#include "sim/replay_metrics.h"
#include "sim/replay_trace.h"

namespace cnlab::sim {

struct GroupStats {
  std::string group;  // a class or a project
  size_t jobs = 0;
  Stats delay, completion;
};

struct RunSummary {
  size_t jobs = 0, finished = 0, never_started = 0;
  Stats delay, completion;
  size_t deadline_jobs = 0, deadline_met = 0;
  std::vector<std::pair<std::string, double>> service_ratio;  // by project, by name
  double jain = 0;
  std::vector<GroupStats> by_class;    // in tier order, classes with jobs only
  std::vector<GroupStats> by_project;  // by name
  double lost_gpu_hours = 0;           // requested GPUs x run time lost to pre-emption
};

RunSummary summarize_run(const ReplayTrace& trace, const ReplayRun& run);

// "45s", "12.5m", "3.2h", "2.1d"; "-" for NaN.
std::string format_seconds(double seconds);

struct ReplayReport {
  const ReplayTrace& trace;
  std::string cluster;  // describe_cluster()
  std::string cluster_source;  // "--nodes FILE" or "--cluster SPEC"
  const ReplayOptions& options;
  const std::vector<ReplayRun>& runs;
};

std::string replay_summary_markdown(const ReplayReport& report);
// time,policy,allocation_pct,utilization_pct,pending,running,nodes_on (time in trace seconds).
std::string replay_timeseries_csv(const std::vector<ReplayRun>& runs);
// One row per job per policy; empty cells for what did not happen.
std::string replay_jobs_csv(const ReplayTrace& trace, const std::vector<ReplayRun>& runs);
// Allocation, utilization and waiting jobs over time, one line per policy.
std::string replay_svg(const std::vector<ReplayRun>& runs);

}  // namespace cnlab::sim
