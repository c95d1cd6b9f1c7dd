// Prometheus metrics: counters, gauges and histograms with labels, rendered in the text exposition
// format (version 0.0.4). Updates are cheap (a lock per family only to find the series; the value
// itself is atomic) because they sit on the request path.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace cnlab::server {

using Labels = std::vector<std::pair<std::string, std::string>>;

class MetricFamily {
 public:
  enum class Type { kCounter, kGauge, kHistogram };
  MetricFamily(std::string name, std::string help, Type type, std::vector<double> buckets = {});

  void inc(const Labels& labels, double by = 1);
  void set(const Labels& labels, double value);
  void observe(const Labels& labels, double value);
  // Drops every series (for gauges recomputed from scratch, e.g. jobs by phase).
  void clear();

  void render(std::string& out) const;
  const std::string& name() const { return name_; }

 private:
  struct Series {
    std::atomic<double> value{0};
    std::vector<std::atomic<uint64_t>> buckets;
    std::atomic<uint64_t> count{0};
    std::atomic<double> sum{0};
  };
  Series& series(const Labels& labels);

  std::string name_;
  std::string help_;
  Type type_;
  std::vector<double> bounds_;
  mutable std::mutex mutex_;
  std::map<std::string, std::unique_ptr<Series>> series_;  // key: rendered label set
};

class Metrics {
  // Declared first: the families below are made in the constructor's initialiser list.
  std::mutex mutex_;
  std::vector<std::unique_ptr<MetricFamily>> families_;
  std::vector<std::function<void()>> refreshers_;

 public:
  Metrics();
  MetricFamily& counter(const std::string& name, const std::string& help);
  MetricFamily& gauge(const std::string& name, const std::string& help);
  MetricFamily& histogram(const std::string& name, const std::string& help, std::vector<double> buckets);
  // Runs before every render, to refresh gauges computed from state.
  void on_render(std::function<void()> refresh);
  std::string render();

  // The server's own families, created once.
  MetricFamily& requests;          // cnlab_http_requests_total{route,code}
  MetricFamily& request_seconds;   // cnlab_http_request_duration_seconds{route}
  MetricFamily& jobs;              // cnlab_jobs{phase,class}
  MetricFamily& blocks_allocated;  // cnlab_gpu_blocks_allocated{model}
  MetricFamily& blocks_free;       // cnlab_gpu_blocks_free{model}
  MetricFamily& queue_wait;        // cnlab_job_queue_wait_seconds (submit to bound)
  MetricFamily& submit_to_start;   // cnlab_job_submit_to_start_seconds (submit to started by its agent)
  MetricFamily& cycle_seconds;     // cnlab_scheduler_cycle_seconds
  MetricFamily& admission_rejections;  // cnlab_admission_rejections_total{reason}
  MetricFamily& store_commit_seconds;  // cnlab_store_commit_seconds
  MetricFamily& nodes;             // cnlab_nodes{phase}
  MetricFamily& power_down_candidates;  // cnlab_nodes_power_down_candidates
  MetricFamily& watchers;          // cnlab_watch_streams
  MetricFamily& migrations;        // cnlab_migrations_total{outcome}: migrated, given_up
  MetricFamily& migration_pause;   // cnlab_migration_pause_seconds{mode}: post-copy, stop-and-copy
  MetricFamily& jobs_migrating;    // cnlab_jobs_migrating: moves under way
  MetricFamily& checkpoints;       // cnlab_checkpoints_total{outcome,kind}: stored (process, files), not_taken
  MetricFamily& checkpoint_bytes;  // cnlab_checkpoint_stored_bytes: the archives jobs keep, each once

 private:
  MetricFamily& add(std::unique_ptr<MetricFamily> family);
};

// Latency buckets from 0.5 ms to 30 s.
std::vector<double> latency_buckets();

}  // namespace cnlab::server
