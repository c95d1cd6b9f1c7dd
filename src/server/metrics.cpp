#include "server/metrics.h"

#include <fmt/format.h>

#include <cmath>

namespace cnlab::server {
namespace {

std::string escape_label(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string render_labels(const Labels& labels) {
  std::string out;
  for (const auto& [key, value] : labels) {
    out += out.empty() ? "" : ",";
    out += key + "=\"" + escape_label(value) + "\"";
  }
  return out;
}

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

void add_atomic(std::atomic<double>& target, double by) {
  double old = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(old, old + by, std::memory_order_relaxed)) {
  }
}

std::string with_label(const std::string& labels, const std::string& extra) {
  return "{" + labels + (labels.empty() ? "" : ",") + extra + "}";
}

}  // namespace

MetricFamily::MetricFamily(std::string name, std::string help, Type type, std::vector<double> buckets)
    : name_(std::move(name)), help_(std::move(help)), type_(type), bounds_(std::move(buckets)) {}

MetricFamily::Series& MetricFamily::series(const Labels& labels) {
  std::string key = render_labels(labels);
  std::lock_guard lock(mutex_);
  auto& slot = series_[key];
  if (!slot) {
    slot = std::make_unique<Series>();
    slot->buckets = std::vector<std::atomic<uint64_t>>(bounds_.size());
  }
  return *slot;
}

void MetricFamily::inc(const Labels& labels, double by) { add_atomic(series(labels).value, by); }
void MetricFamily::set(const Labels& labels, double value) { series(labels).value.store(value); }

void MetricFamily::observe(const Labels& labels, double value) {
  Series& s = series(labels);
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (value <= bounds_[i]) s.buckets[i].fetch_add(1, std::memory_order_relaxed);
  }
  s.count.fetch_add(1, std::memory_order_relaxed);
  add_atomic(s.sum, value);
}

void MetricFamily::clear() {
  std::lock_guard lock(mutex_);
  series_.clear();
}

void MetricFamily::render(std::string& out) const {
  static constexpr const char* kTypes[] = {"counter", "gauge", "histogram"};
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name_, help_, name_, kTypes[static_cast<int>(type_)]);
  std::lock_guard lock(mutex_);
  for (const auto& [labels, s] : series_) {
    if (type_ != Type::kHistogram) {
      out += name_ + (labels.empty() ? "" : "{" + labels + "}") + " " + number(s->value.load()) + "\n";
      continue;
    }
    // Buckets are counted per bound already (each observation lands in every bound above it).
    for (size_t i = 0; i < bounds_.size(); ++i) {
      out += name_ + "_bucket" + with_label(labels, "le=\"" + number(bounds_[i]) + "\"") + " " +
             std::to_string(s->buckets[i].load()) + "\n";
    }
    out += name_ + "_bucket" + with_label(labels, "le=\"+Inf\"") + " " + std::to_string(s->count.load()) + "\n";
    std::string plain = labels.empty() ? "" : "{" + labels + "}";
    out += name_ + "_sum" + plain + " " + number(s->sum.load()) + "\n";
    out += name_ + "_count" + plain + " " + std::to_string(s->count.load()) + "\n";
  }
}

std::vector<double> latency_buckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
}

Metrics::Metrics()
    : requests(counter("cnlab_http_requests_total", "API requests by route and status code")),
      request_seconds(histogram("cnlab_http_request_duration_seconds", "API request latency by route",
                                latency_buckets())),
      jobs(gauge("cnlab_jobs", "Jobs by phase and priority class")),
      blocks_allocated(gauge("cnlab_gpu_blocks_allocated", "1% GPU blocks held by jobs, per GPU model")),
      blocks_free(gauge("cnlab_gpu_blocks_free", "1% GPU blocks free on schedulable nodes, per GPU model")),
      queue_wait(histogram("cnlab_job_queue_wait_seconds", "Time from submission to being bound to a node",
                           {0.01, 0.05, 0.1, 0.5, 1, 5, 30, 60, 300, 1800, 3600, 14400, 86400})),
      submit_to_start(histogram("cnlab_job_submit_to_start_seconds",
                                "Time from submission to the agent starting the job",
                                {0.05, 0.1, 0.5, 1, 5, 30, 60, 300, 1800, 3600, 14400, 86400})),
      cycle_seconds(histogram("cnlab_scheduler_cycle_seconds", "Duration of one scheduling cycle, snapshot upkeep included",
                              latency_buckets())),
      admission_rejections(counter("cnlab_admission_rejections_total", "Job submissions refused at admission, by reason")),
      store_commit_seconds(histogram("cnlab_store_commit_seconds", "Store transaction latency, queueing and fsync included",
                                     latency_buckets())),
      nodes(gauge("cnlab_nodes", "Nodes by phase")),
      power_down_candidates(gauge("cnlab_nodes_power_down_candidates",
                                  "Nodes the scheduler found idle for its power_down_after, nothing reserved on them")),
      watchers(gauge("cnlab_watch_streams", "Open watch and log-follow streams")),
      migrations(counter("cnlab_migrations_total", "Live migrations ended, by outcome (migrated, given_up)")),
      migration_pause(histogram("cnlab_migration_pause_seconds",
                                "How long a migrated job was frozen, from its source's dump to running on its target",
                                {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300})),
      jobs_migrating(gauge("cnlab_jobs_migrating", "Jobs with a live migration under way")),
      checkpoints(counter("cnlab_checkpoints_total",
                          "Checkpoints stored (by kind: process, files) and asked for but not taken (not_taken)")),
      checkpoint_bytes(gauge("cnlab_checkpoint_stored_bytes",
                             "Bytes of the checkpoint archives the server keeps for jobs (each archive once)")) {}

MetricFamily& Metrics::add(std::unique_ptr<MetricFamily> family) {
  std::lock_guard lock(mutex_);
  families_.push_back(std::move(family));
  return *families_.back();
}

MetricFamily& Metrics::counter(const std::string& name, const std::string& help) {
  return add(std::make_unique<MetricFamily>(name, help, MetricFamily::Type::kCounter));
}
MetricFamily& Metrics::gauge(const std::string& name, const std::string& help) {
  return add(std::make_unique<MetricFamily>(name, help, MetricFamily::Type::kGauge));
}
MetricFamily& Metrics::histogram(const std::string& name, const std::string& help, std::vector<double> buckets) {
  return add(std::make_unique<MetricFamily>(name, help, MetricFamily::Type::kHistogram, std::move(buckets)));
}

void Metrics::on_render(std::function<void()> refresh) {
  std::lock_guard lock(mutex_);
  refreshers_.push_back(std::move(refresh));
}

std::string Metrics::render() {
  std::vector<std::function<void()>> refreshers;
  {
    std::lock_guard lock(mutex_);
    refreshers = refreshers_;
  }
  for (auto& refresh : refreshers) refresh();
  std::string out;
  std::lock_guard lock(mutex_);
  for (const auto& family : families_) family->render(out);
  return out;
}

}  // namespace cnlab::server
