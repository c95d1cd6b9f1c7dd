#include "sim/alloc_experiment.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "sim/alloc_measure.h"

namespace cnlab::sim {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

}  // namespace

Result<ExperimentResult> run_experiment(const AllocCluster& cluster, const ExperimentSpec& spec,
                                        const PolicyRegistry& registry) {
  if (spec.workloads.empty()) return Error::invalid_argument("workloads", "", "need at least one workload");
  if (spec.policies.empty()) return Error::invalid_argument("policies", "", "need at least one policy");
  if (spec.seeds.empty()) return Error::invalid_argument("seeds", "", "need at least one seed");
  if (spec.tune_percent < 1 || spec.tune_percent > 1000) {
    return Error::invalid_argument("tune_percent", std::to_string(spec.tune_percent), "must be 1..1000");
  }
  // Names come from the policies themselves; making one per key also validates the keys up front.
  std::vector<std::string> names;
  for (const std::string& key : spec.policies) {
    auto policy = registry.make(key, spec.workloads[0]);
    if (!policy) return policy.error();
    if (auto accepted = (*policy)->accepts(cluster); !accepted) return accepted.error();
    names.emplace_back((*policy)->name());
  }
  const auto start = Clock::now();

  // Pod order and ranks depend on (workload, seed) only: every policy sees the same ones.
  const size_t nw = spec.workloads.size(), np = spec.policies.size(), ns = spec.seeds.size();
  std::vector<RunPlan> plans(nw * ns);
  for (size_t w = 0; w < nw; ++w) {
    for (size_t s = 0; s < ns; ++s) {
      plans[w * ns + s] = make_run_plan(spec.workloads[w].pods, cluster.node_count(), cluster.gpu_capacity_total(),
                                        spec.seeds[s], spec.tune_percent);
    }
  }

  const size_t total = nw * np * ns;
  std::vector<std::optional<Result<RunResult>>> results(total);
  std::vector<double> seconds(total, 0.0);
  std::atomic<size_t> next{0};
  std::mutex mutex;
  std::condition_variable finished;
  size_t done = 0;

  auto worker = [&] {
    AllocCluster local = cluster;
    while (true) {
      size_t task = next.fetch_add(1);
      if (task >= total) return;
      size_t w = task / (np * ns), p = task / ns % np, s = task % ns;
      const Workload& workload = spec.workloads[w];
      const auto run_start = Clock::now();
      auto policy = registry.make(spec.policies[p], workload);
      std::optional<Result<RunResult>> result;
      if (policy) {
        RunContext context{workload.name, spec.seeds[s], spec.tune_percent};
        result.emplace(run_allocation(local, workload, plans[w * ns + s], **policy, context, spec.migrations));
      } else {
        result.emplace(policy.error());
      }
      std::lock_guard lock(mutex);
      results[task] = std::move(result);
      seconds[task] = seconds_since(run_start);
      ++done;
      finished.notify_one();
    }
  };

  size_t threads = static_cast<size_t>(std::clamp(spec.threads, 1, 256));
  threads = std::min(threads, total);
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (size_t t = 0; t < threads; ++t) pool.emplace_back(worker);
  {
    std::unique_lock lock(mutex);
    size_t reported = 0;
    while (reported < total) {
      finished.wait(lock, [&] { return done > reported; });
      reported = done;
      if (spec.progress) {
        lock.unlock();
        spec.progress(reported, total);
        lock.lock();
      }
    }
  }
  for (auto& t : pool) t.join();

  ExperimentResult out;
  out.tune_percent = spec.tune_percent;
  for (size_t w = 0; w < nw; ++w) {
    WorkloadCeiling& ceiling = out.ceilings.emplace_back();
    ceiling.workload = spec.workloads[w].name;
    for (size_t s = 0; s < ns; ++s) {
      ceiling.per_seed.push_back(
          allocation_ceiling(spec.workloads[w].pods, plans[w * ns + s].order, cluster.gpu_capacity_total()));
    }
  }
  for (size_t w = 0; w < nw; ++w) {
    for (size_t p = 0; p < np; ++p) {
      PolicyCurve curve;
      curve.workload = spec.workloads[w].name;
      curve.policy = names[p];
      std::vector<std::vector<int64_t>> per_seed;
      for (size_t s = 0; s < ns; ++s) {
        size_t task = (w * np + p) * ns + s;
        Result<RunResult>& r = *results[task];
        if (!r) return r.error();
        per_seed.push_back(r->curve);
        curve.runs.push_back({spec.seeds[s], std::move(*r), seconds[task]});
      }
      curve.mean = mean_curve(per_seed);
      out.curves.push_back(std::move(curve));
    }
  }
  out.wall_seconds = seconds_since(start);
  return out;
}

}  // namespace cnlab::sim
