#include "sim/alloc_leftovers.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <vector>

namespace cnlab::sim {
namespace {

double mean_over_runs(const PolicyCurve& c, int64_t Leftovers::*field) {
  double sum = 0;
  for (const SeedRun& run : c.runs) {
    const Leftovers& l = run.result.leftovers;
    if (l.capacity > 0) sum += 100.0 * static_cast<double>(l.*field) / static_cast<double>(l.capacity);
  }
  return c.runs.empty() ? 0 : sum / static_cast<double>(c.runs.size());
}

std::map<int, double> mean_histogram(const PolicyCurve& c, std::map<int, int64_t> Leftovers::*field) {
  std::map<int, double> mean;
  for (const SeedRun& run : c.runs) {
    for (const auto& [key, count] : run.result.leftovers.*field) mean[key] += static_cast<double>(count);
  }
  for (auto& [key, value] : mean) value /= static_cast<double>(c.runs.size());
  return mean;
}

}  // namespace

std::string leftovers_csv(const ExperimentResult& result) {
  std::string out = "workload,policy,seeds,measure,key,mean\n";
  for (const PolicyCurve& c : result.curves) {
    auto row = [&](std::string_view measure, std::string key, double value) {
      out += fmt::format("{},{},{},{},{},{:.4f}\n", c.workload, c.policy, c.runs.size(), measure, key, value);
    };
    row("free_on_partly_used_gpus", "", mean_over_runs(c, &Leftovers::on_partly_used_gpus));
    row("free_behind_used_up_cpu", "", mean_over_runs(c, &Leftovers::behind_used_up_cpu));
    row("free_idle_elsewhere", "", mean_over_runs(c, &Leftovers::idle_elsewhere));
    for (auto [field, measure] : {std::pair{&Leftovers::partly_used_gpus_by_free, "partly_used_gpus_by_free"},
                                  std::pair{&Leftovers::arrived_by_milli, "arrived_by_milli"},
                                  std::pair{&Leftovers::placed_by_milli, "placed_by_milli"}}) {
      for (const auto& [key, value] : mean_histogram(c, field)) row(measure, std::to_string(key), value);
    }
  }
  return out;
}

std::string leftovers_markdown(const ExperimentResult& result) {
  std::string out = fmt::format(
      "\n# Where the free capacity is at the end ({}% arrived)\n\nIn % of the cluster's GPU capacity, mean over "
      "the seeds: on GPUs that hold a pod; on idle GPUs of nodes with less free CPU than any GPU pod asked; on "
      "other idle GPUs. Then the free amounts (milli) left on the most partly used GPUs.\n",
      result.tune_percent);
  std::string workload;
  for (const PolicyCurve& c : result.curves) {
    if (c.workload != workload) {
      workload = c.workload;
      out += fmt::format("\n## {}\n\n| policy | partly used GPUs | behind used-up CPU | idle elsewhere | most common "
                         "leftovers (milli x GPUs) |\n|---|---:|---:|---:|---|\n",
                         workload);
    }
    std::map<int, double> by_free = mean_histogram(c, &Leftovers::partly_used_gpus_by_free);
    std::vector<std::pair<int, double>> common(by_free.begin(), by_free.end());
    std::sort(common.begin(), common.end(), [](const auto& a, const auto& b) {
      return a.second != b.second ? a.second > b.second : a.first < b.first;
    });
    std::string top;
    for (size_t i = 0; i < common.size() && i < 3; ++i) {
      top += fmt::format("{}{} x {:.0f}", i ? ", " : "", common[i].first, common[i].second);
    }
    out += fmt::format("| {} | {:.2f} | {:.2f} | {:.2f} | {} |\n", c.policy,
                       mean_over_runs(c, &Leftovers::on_partly_used_gpus),
                       mean_over_runs(c, &Leftovers::behind_used_up_cpu), mean_over_runs(c, &Leftovers::idle_elsewhere),
                       top);
  }
  return out;
}

}  // namespace cnlab::sim
