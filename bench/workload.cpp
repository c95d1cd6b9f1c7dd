#include "workload.h"

#include <utility>

namespace cnlab::bench {
namespace {

const cnlab::Time kStart = *cnlab::parse_rfc3339("2026-11-30T10:00:00Z", "start");

std::vector<model::Node> make_nodes(int count, std::mt19937_64& rng) {
  std::vector<model::Node> nodes;
  nodes.reserve(count);
  auto h100 = *model::find_model("h100"), a100 = *model::find_model("a100m80"), h200 = *model::find_model("h200");
  int mig_3g = *model::parse_mig_profile(h100, "3g.40gb", "p");
  for (int n = 0; n < count; ++n) {
    model::Node node;
    node.meta.name = "gpu-" + std::to_string(n);
    node.cpu_milli = 192000;
    node.memory_mib = 2048 * 1024;
    int roll = static_cast<int>(rng() % 100);
    model::ModelId m = roll < 80 ? h100 : roll < 95 ? a100 : h200;
    for (int g = 0; g < 8; ++g) {
      model::Gpu gpu{g, node.meta.name + "-" + std::to_string(g), m, model::gpu_model(m).memory_mib, true, false, {}};
      if (m == h100 && g == 7 && n % 2 == 0) {
        gpu.mig_enabled = true;
        gpu.mig_instances = {{mig_3g, 0}, {mig_3g, 4}};
      }
      node.gpus.push_back(std::move(gpu));
    }
    node.idle_since = kStart - cnlab::kHour;
    nodes.push_back(std::move(node));
  }
  return nodes;
}

model::Job make_job(int i, std::mt19937_64& rng, bool small_only) {
  static const char* kClasses[] = {"inference", "production", "production", "dev", "dev", "dev", "opportunistic"};
  static const char* kModels[] = {"h100", "h100", "h100", "a100m80", "any", "h200"};
  model::Job job;
  job.meta.name = "job-" + std::to_string(i);
  job.spec.project = "team-" + std::to_string(rng() % 50);
  job.spec.user = "user-" + std::to_string(rng() % 10);
  job.spec.priority_class = kClasses[rng() % 7];
  std::string m = kModels[rng() % 6];
  int roll = static_cast<int>(rng() % 100);
  std::string gpu;
  if (small_only || roll < 50) gpu = m + "-" + std::to_string(1 + rng() % 50);
  else if (roll < 80) gpu = m;
  else if (roll < 90) gpu = m + "x2";
  else if (roll < 96) gpu = m + "x4";
  else if (roll < 98) gpu = m + "x8";
  else gpu = "h100:3g.40gb";
  job.spec.gpu = *model::parse_slice(gpu);
  job.spec.cpu_milli = 1000 * static_cast<int64_t>(1 + rng() % 8) * job.spec.gpu.gpu_count;
  job.spec.memory_mib = 4096 * static_cast<int64_t>(1 + rng() % 8) * job.spec.gpu.gpu_count;
  if (rng() % 10 < 7) job.spec.estimated_duration = cnlab::Duration{600 + static_cast<int64_t>(rng() % 36000)};
  if (job.spec.estimated_duration && rng() % 100 == 0) {
    job.spec.deadline = kStart + *job.spec.estimated_duration + cnlab::Duration{static_cast<int64_t>(rng() % 86400)};
  }
  job.spec.checkpointable = rng() % 2 == 0;
  job.status.submitted_at = kStart - cnlab::Duration{static_cast<int64_t>(rng() % 86400)};
  return job;
}

}  // namespace

sched::Snapshot loaded_cluster(const WorkloadSpec& spec) {
  std::mt19937_64 rng(spec.seed);
  sched::Snapshot s;
  s.now = kStart;
  s.nodes = make_nodes(spec.nodes, rng);
  int total = spec.nodes * spec.jobs_per_node;
  s.jobs.reserve(total);
  for (int i = 0; i < total; ++i) s.jobs.push_back(make_job(i, rng, false));
  for (int p = 0; p < 50; ++p) s.usage.add("team-" + std::to_string(p), "user-0", 1e6 * (p % 7), kStart - cnlab::kDay);
  // Fill as if every job had the same class, so every tier is among the running jobs.
  std::vector<std::string> classes;
  for (auto& job : s.jobs) classes.push_back(std::exchange(job.spec.priority_class, "dev"));
  sched::apply_decisions(sched::run_cycle(s, {}), s);
  for (size_t i = 0; i < s.jobs.size(); ++i) s.jobs[i].spec.priority_class = classes[i];
  // Running jobs started at different times, each still within its estimate.
  for (auto& job : s.jobs) {
    if (job.status.phase != model::JobPhase::kRunning) continue;
    int64_t span = job.spec.estimated_duration ? job.spec.estimated_duration->count() : 36000;
    job.status.started_at = kStart - cnlab::Duration{static_cast<int64_t>(rng() % span)};
    if (job.spec.checkpointable) job.status.last_checkpoint_at = *job.status.started_at + cnlab::Duration{
        static_cast<int64_t>(rng() % (kStart - *job.status.started_at + cnlab::Duration{1}).count())};
  }
  s.now += cnlab::kMinute;
  return s;
}

sched::Snapshot empty_cluster_with_pending_jobs(int nodes, int jobs, bool blocks_only, uint64_t seed) {
  std::mt19937_64 rng(seed);
  sched::Snapshot s;
  s.now = kStart;
  s.nodes = make_nodes(nodes, rng);
  for (int i = 0; i < jobs; ++i) s.jobs.push_back(make_job(i, rng, blocks_only));
  return s;
}

}  // namespace cnlab::bench
